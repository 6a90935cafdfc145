"""gpuplace's whole-GPU reserve (issue 19): once partly used GPUs have room for the shared pods still expected, a
shared pod of more than half a GPU may not open a whole GPU that a whole-GPU pod could use; never on a mix with no
whole-GPU pod, never for memory slices or pods that share their GPU."""

import pytest

from gpuplace.core.demand import resolve
from gpuplace.core.framework.interface import PolicyContext
from gpuplace.core.framework.runtime import decide
from gpuplace.core.gpu_load import GpuLoad
from gpuplace.core.latency.model import ClassProfile, LatencyModel, Stream, Tail
from gpuplace.core.policies.gpuplace.policy import Gpuplace
from gpuplace.core.policies.gpuplace.shape_estimate import ShapeEstimate, hostable_shapes
from gpuplace.core.policies.gpuplace.whole_gpu_reserve import (
    PLUGIN,
    ReserveMix,
    held_back,
    reserve_holds,
    reserve_mix,
)
from gpuplace.core.policies.latency_aware import latency_aware
from gpuplace.core.snapshot import ClusterSnapshot

from ..core.builders import make_node, make_pod

MODEL = LatencyModel(Tail(1.0, 2.0, 0.5), Tail(1.2, 2.0, 1.0), Tail(1.3, 2.5, 1.0),
                     classes={"det": ClassProfile(4.0, 0.5)})  # as tests/unit/latency/test_policies.py
MIX = ReserveMix(whole_part=0.5, cpu_per_gpu=2_000.0, cpu_per_whole_gpu=4_000.0)


def _fleet(used_free: tuple[int, ...], fresh: int = 2) -> ClusterSnapshot:
    """Node a: GPUs with the given free shares (partly used); node b: `fresh` untouched GPUs; CPU to spare."""
    return ClusterSnapshot([make_node("a").cpu(64).gpus(len(used_free)).free(*used_free).build(),
                            make_node("b").cpu(64).gpus(fresh).build()])


def test_the_reserve_holds_only_once_the_room_takes_the_shared_pods_still_expected():
    # room 8 x 0.6 = 4.8 GPUs; usable 6.8; shared part 0.5 x 6.8 = 3.4 <= 4.8: holds
    assert reserve_holds(_fleet((600,) * 8), MIX, 1.0)
    # room 2 x 0.6 = 1.2 < 0.5 x 3.2: the shared pods to come need fresh GPUs too
    assert not reserve_holds(_fleet((600,) * 2), MIX, 1.0)
    # the setting scales the shared demand the room must reach: 2 x 3.4 > 4.8
    assert not reserve_holds(_fleet((600,) * 8), MIX, 2.0)
    # no whole GPU left that a whole-GPU pod could take: nothing to keep
    assert not reserve_holds(_fleet((600,) * 8, fresh=0), MIX, 1.0)


def test_held_back_keeps_a_big_shared_pod_off_fresh_gpus_only():
    snapshot = _fleet((600,) * 8)
    big = resolve(make_pod("p810").cpu(2).gpu_share(810).build(), snapshot)
    held = held_back(snapshot, big, MIX, 1.0)
    assert held is not None and held.tolist() == [False, True]  # b would open a fresh GPU; a cannot take it anyway
    fits_used = resolve(make_pod("p550").cpu(2).gpu_share(550).build(), snapshot)
    held = held_back(snapshot, fits_used, MIX, 1.0)
    assert held is not None and held.tolist() == [False, True]  # a's used GPUs take it: only b's fresh one is kept


@pytest.mark.parametrize("pod", [
    make_pod("half").cpu(2).gpu_share(500).build(),  # two share a GPU: not held
    make_pod("slice").cpu(2).gpu_memory_mib(14_000).build(),  # memory slices are not held
    make_pod("whole").cpu(4).whole_gpus(1).build(),
    make_pod("cpu").cpu(2).build(),
])
def test_the_reserve_never_holds_pods_that_are_not_big_shares(pod):
    snapshot = _fleet((600,) * 8)
    assert held_back(snapshot, resolve(pod, snapshot), MIX, 1.0) is None


def test_the_reserve_leaves_a_fresh_gpu_on_a_node_whose_cpu_could_not_feed_a_whole_gpu_pod():
    snapshot = ClusterSnapshot([make_node("a").cpu(64).gpus(8).free(*(600,) * 8).build(),
                                make_node("b").cpu(64, free=5).gpus(2).build()])
    big = resolve(make_pod("p810").cpu(2).gpu_share(810).build(), snapshot)
    assert held_back(snapshot, big, MIX, 1.0) is None  # b keeps 3 cores after it, a whole-GPU pod asks 4


def _workload(pods, snapshot):
    estimate = ShapeEstimate(half_life_pods=1_000.0)
    estimate.set_prior(hostable_shapes(snapshot.gpu_count, ("V100M16",) * snapshot.n_nodes, 32.0))
    for pod in pods:
        estimate.observe(resolve(pod, snapshot))
    return estimate.build(snapshot.gpu_types)


def test_the_mix_is_the_pods_seen_and_none_without_whole_gpu_pods():
    snapshot = _fleet((1000,) * 8)
    shared = [make_pod(f"s{i}").cpu(2).gpu_share(800).build() for i in range(6)]
    # the prior expects whole GPUs of every count, but none was seen: the reserve never holds
    assert reserve_mix(_workload(shared, snapshot)) is None
    whole = [make_pod("w").cpu(8).whole_gpus(2).build()]
    assert reserve_mix(_workload(whole, snapshot)) is None  # no shared demand seen: nothing to weigh it against
    mix = reserve_mix(_workload(shared + whole, snapshot))
    assert mix is not None
    assert mix.whole_part == pytest.approx(2.0 / (2.0 + 6 * 0.8), rel=1e-2)  # decayed counts
    assert mix.cpu_per_whole_gpu == pytest.approx(4_000.0)
    assert mix.cpu_per_gpu == pytest.approx((8_000 + 6 * 2_000) / (2.0 + 6 * 0.8), rel=1e-2)


def test_the_cpu_of_pods_that_ask_no_gpu_counts_against_what_the_gpus_can_be_fed():
    snapshot = _fleet((1000,) * 8)
    gpu_pods = [make_pod(f"s{i}").cpu(2).gpu_share(800).build() for i in range(6)] + [
        make_pod("w").cpu(8).whole_gpus(2).build()]
    cpu_only = [make_pod(f"c{i}").cpu(10).build() for i in range(2)]
    alone, beside = reserve_mix(_workload(gpu_pods, snapshot)), reserve_mix(_workload(gpu_pods + cpu_only, snapshot))
    assert alone is not None and beside is not None
    # the CPU-only pods' 20 cores eat the CPU that would feed the GPUs: more CPU per GPU asked (issue 39)
    assert beside.cpu_per_gpu == pytest.approx((8_000 + 6 * 2_000 + 20_000) / (2.0 + 6 * 0.8), rel=1e-2)
    assert beside.whole_part == pytest.approx(alone.whole_part, rel=1e-2)


def _taught(context: PolicyContext, snapshot: ClusterSnapshot) -> Gpuplace:
    """gpuplace that has scored whole-GPU pods and 400m pods (whole part 1000 / (1000 + 2 x 400) = 0.56)."""
    policy = Gpuplace(context)
    whole = resolve(make_pod("w").cpu(4).whole_gpus(1).build(), snapshot)
    shared = resolve(make_pod("s").cpu(2).gpu_share(400).build(), snapshot)
    for _ in range(40):
        decide(snapshot, whole, policy)
        decide(snapshot, shared, policy)
        decide(snapshot, shared, policy)
    return policy


def test_gpuplace_holds_a_big_shared_pod_back_with_a_reason_and_the_setting_turns_it_off():
    snapshot = ClusterSnapshot([make_node("a").cpu(64).gpus(8).free(*(450,) * 8).build(),
                                make_node("b").cpu(64).gpus(2).build()])
    big = resolve(make_pod("p810").cpu(2).gpu_share(810).build(), snapshot)
    policy = _taught(PolicyContext(), snapshot)
    decision = decide(snapshot, big, policy, explain=True)
    assert not decision.scheduled
    assert decision.statuses["b"].plugin == PLUGIN
    assert policy.held_back == 1
    off = _taught(PolicyContext(whole_gpu_reserve=0.0), snapshot)
    assert decide(snapshot, big, off).node_name == "b"
    # a whole-GPU pod still gets the GPU kept for it
    assert decide(snapshot, resolve(make_pod("w2").cpu(4).whole_gpus(1).build(), snapshot), policy).node_name == "b"


def test_gpuplace_never_holds_back_on_a_mix_without_whole_gpu_pods():
    snapshot = ClusterSnapshot([make_node("a").cpu(64).gpus(8).free(*(450,) * 8).build(),
                                make_node("b").cpu(64).gpus(2).build()])
    policy = Gpuplace(PolicyContext())
    shared = resolve(make_pod("s").cpu(2).gpu_share(600).build(), snapshot)
    for _ in range(80):
        decide(snapshot, shared, policy)
    big = resolve(make_pod("p810").cpu(2).gpu_share(810).build(), snapshot)
    assert decide(snapshot, big, policy).node_name == "b"
    assert policy.held_back == 0


def test_the_reserve_lets_go_once_more_pods_were_held_than_whole_gpus_are_left():
    snapshot = _fleet((600,) * 8)  # holds (first test), 2 whole GPUs left on b
    assert reserve_holds(snapshot, MIX, 1.0, held_in_a_row=1)
    assert not reserve_holds(snapshot, MIX, 1.0, held_in_a_row=2)


def test_a_big_shared_pod_retried_with_no_whole_gpu_pod_coming_is_placed_in_the_end():
    """A live fleet retries a pending pod every cycle; held-back pods are not counted in the mix, so without the
    bound the estimate would never move and the pod would wait for good beside idle whole GPUs."""
    snapshot = ClusterSnapshot([make_node("a").cpu(64).gpus(8).free(*(450,) * 8).build(),
                                make_node("b").cpu(64).gpus(2).build()])
    policy = _taught(PolicyContext(), snapshot)

    def retry() -> bool:  # each attempt resolves the pod again, as placement and the simulators do
        return decide(snapshot, resolve(make_pod("p810").cpu(2).gpu_share(810).build(), snapshot), policy).scheduled

    tries = [retry() for _ in range(3)]
    assert tries == [False, False, True]  # held while whole GPUs (2) outnumber the pods held in a row
    decide(snapshot, resolve(make_pod("w").cpu(4).whole_gpus(1).build(), snapshot), policy)
    assert not retry()  # a whole-GPU pod came: the reserve holds again


def test_a_node_with_room_in_a_used_gpu_stays_open_though_it_also_has_a_fresh_one():
    snapshot = ClusterSnapshot([make_node("a").cpu(64).gpus(8).free(*(600,) * 8).build(),
                                make_node("b").cpu(64).gpus(2).build(),
                                make_node("c").cpu(64).gpus(2).free(600, 1000).build()])
    fits_used = resolve(make_pod("p550").cpu(2).gpu_share(550).build(), snapshot)
    held = held_back(snapshot, fits_used, MIX, 1.0)
    assert held is not None and held.tolist() == [False, True, False]  # on c it takes the used GPU
    big = resolve(make_pod("p810").cpu(2).gpu_share(810).build(), snapshot)
    held = held_back(snapshot, big, MIX, 1.0)
    assert held is not None and held.tolist() == [False, True, True]  # on c it would open the fresh one


def test_a_held_back_decision_counts_once_behind_the_latency_filter():
    """latency_aware asks its base for verdicts twice per decision (on the snapshot, then on its latency view): the
    pod held back still counts once towards the release bound (whole_gpu_reserve.reserve_holds)."""
    snapshot = ClusterSnapshot([make_node("a").cpu(64).gpus(8).free(*(450,) * 8).build(),
                                make_node("b").cpu(64).gpus(2).build()])
    base = _taught(PolicyContext(), snapshot)
    streams = {"p810": Stream(30.0, "det", deadline_ms=1000 / 30)}
    policy = latency_aware(base, MODEL, GpuLoad.for_snapshot(snapshot), streams)
    big = resolve(make_pod("p810").cpu(2).gpu_share(810).build(), snapshot)
    assert not decide(snapshot, big, policy).scheduled
    assert base.held_back == 1
    assert not decide(snapshot, resolve(make_pod("p810").cpu(2).gpu_share(810).build(), snapshot), policy).scheduled
    assert base.held_back == 2  # a retry is a decision of its own
