"""GPU topology (core/topology.py): multi-GPU pods in one NUMA node / NVLink domain whenever they fit there, for
every policy; the score effect; `required` with its reasons; nodes without topology placed as before."""

from __future__ import annotations

import numpy as np
import pytest

from gpuplace.core.defrag.blockers import could_ever_fit
from gpuplace.core.demand import resolve
from gpuplace.core.filters import gpu_topology
from gpuplace.core.framework.interface import Code, Policy, PolicyContext
from gpuplace.core.framework.runtime import bind, decide, place
from gpuplace.core.model import Node
from gpuplace.core.policies import registry
from gpuplace.core.policies.gpuplace.policy import SPAN_PENALTY_MILLI
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.core.workload import typical_workload

from .builders import make_node, make_pod

TWO_NUMA = (0, 0, 0, 0, 1, 1, 1, 1)


def dgx(name: str, *free: int, numa: tuple[int, ...] | None = TWO_NUMA) -> Node:
    """8 whole GPUs (free share per GPU index, 1000 = idle), two NUMA nodes of four unless numa=None."""
    builder = make_node(name).cpu(128).memory_mib(1 << 20).gpus(8, "H100", 81920).free(*free)
    return (builder.numa(*numa) if numa is not None else builder).build()


def policy_for(name: str, snapshot: ClusterSnapshot) -> Policy:
    pods = [make_pod(f"w{k}").whole_gpus(k).build() for k in (1, 2, 4)] + [make_pod("s").gpu_share(300).build()]
    return registry.create(name, PolicyContext(workload=typical_workload(pods, snapshot.gpu_types,
                                                                          coverage_pct=100.0)))


def numa_of(snapshot: ClusterSnapshot, node: int, gpus: tuple[int, ...]) -> set[int]:
    return {int(snapshot.gpu_numa[node, g]) for g in gpus}


@pytest.mark.parametrize("name", registry.names())
def test_a_multi_gpu_pod_on_a_node_with_two_numa_nodes_gets_gpus_of_one_numa_node_whenever_they_fit(name):
    rng = np.random.default_rng(18)
    checked = 0
    for trial in range(150):
        busy = rng.random(8) < 0.4
        snapshot = ClusterSnapshot([dgx("n", *np.where(busy, 0, 1000))])
        count = int(rng.integers(2, 5))
        free_per_numa = [int((~busy[:4]).sum()), int((~busy[4:]).sum())]
        if sum(free_per_numa) < count:
            continue
        decision = place(snapshot, make_pod(f"p{trial}").whole_gpus(count).build(), policy_for(name, snapshot))
        assert decision.scheduled and len(decision.gpu_indices) == count
        assert not busy[list(decision.gpu_indices)].any()
        if max(free_per_numa) >= count:
            assert len(numa_of(snapshot, 0, decision.gpu_indices)) == 1, (busy, decision.gpu_indices)
            checked += 1
    assert checked > 50  # the property was exercised, not skipped


def test_the_pod_takes_the_tightest_numa_node_that_fits_so_the_other_stays_whole():
    # GPU 1 busy: best fit by index would take 0, 2, 3, 4 (two NUMA nodes); NUMA 1 is whole and fits
    snapshot = ClusterSnapshot([dgx("n", 1000, 0)])
    assert place(snapshot, make_pod("p").whole_gpus(4).build(), policy_for("bestfit", snapshot)).gpu_indices == \
        (4, 5, 6, 7)
    # GPUs 4 and 5 busy: a 2-GPU pod takes 6, 7 (the NUMA node with 2 usable), not 0, 1: NUMA 0 stays whole for 4
    snapshot = ClusterSnapshot([dgx("n", 1000, 1000, 1000, 1000, 0, 0)])
    assert place(snapshot, make_pod("p").whole_gpus(2).build(), policy_for("bestfit", snapshot)).gpu_indices == \
        (6, 7)


def test_an_nvlink_pair_inside_a_numa_node_is_one_domain():
    # a PCIe node: NUMA 0 / 1 of four GPUs, NVLink bridges in pairs; GPU 0 busy
    node = make_node("pcie").cpu(64).gpus(8, "A40", 46068).free(0).numa(*TWO_NUMA).nvlink(0, 0, 1, 1, 2, 2, 3, 3)
    snapshot = ClusterSnapshot([node.build()])
    decision = place(snapshot, make_pod("p").whole_gpus(2).build(), policy_for("fgd", snapshot))
    assert decision.gpu_indices == (2, 3)  # the first whole pair; (1, 2) would cross a bridge


@pytest.mark.parametrize("name", [n for n in registry.names() if n != "random"])  # random: nodes never score equal
def test_a_node_where_the_pod_fits_in_one_numa_node_beats_one_where_it_must_span_other_things_equal(name):
    # same free GPUs on both (4 of 8), first in node order wins ties; only the layout differs
    spread = dgx("spread", 0, 0, 1000, 1000, 0, 0, 1000, 1000)  # 2 + 2: a 4-GPU pod spans
    packed = dgx("packed", 0, 0, 0, 0)  # NUMA 1 whole
    snapshot = ClusterSnapshot([spread, packed])
    decision = place(snapshot, make_pod("p").whole_gpus(4).build(), policy_for(name, snapshot))
    assert (decision.node_name, decision.gpu_indices) == ("packed", (4, 5, 6, 7))
    bare = ClusterSnapshot([dgx("spread", 0, 0, 1000, 1000, 0, 0, numa=None), dgx("packed", 0, 0, 0, 0, numa=None)])
    assert place(bare, make_pod("p").whole_gpus(4).build(), policy_for(name, bare)).node_name == "spread"


def test_the_house_policy_scores_spanning_one_gpu_of_waste_lower():
    snapshot = ClusterSnapshot([dgx("spread", 0, 0, 1000, 1000, 0, 0), dgx("packed", 0, 0, 0, 0)])
    decision = place(snapshot, make_pod("p").whole_gpus(4).build(), policy_for("gpuplace", snapshot))
    (runner_up, runner_up_score), = decision.runners_up
    assert runner_up == "spread" and decision.score is not None
    assert decision.score - runner_up_score == pytest.approx(SPAN_PENALTY_MILLI)


def test_spanning_is_still_allowed_when_no_numa_node_fits_a_preferred_pod():
    snapshot = ClusterSnapshot([dgx("n", 0, 0, 1000, 1000, 0, 0)])
    decision = place(snapshot, make_pod("p").whole_gpus(4).build(), policy_for("gpuplace", snapshot))
    assert decision.gpu_indices == (2, 3, 6, 7)


def test_a_required_pod_waits_where_it_would_span_and_says_why():
    snapshot = ClusterSnapshot([
        dgx("spread", 0, 0, 1000, 1000, 0, 0),  # 2 + 2 free
        dgx("bare", numa=None),  # no topology described
        make_node("small").cpu(64).gpus(4, "H100", 81920).numa(0, 0, 1, 1).build(),  # domains of 2
    ])
    pod = make_pod("p").whole_gpus(4).topology("required").build()
    decision = place(snapshot, pod, policy_for("gpuplace", snapshot))
    assert not decision.scheduled and decision.resolvable
    spread, bare, small = (decision.statuses[n] for n in ("spread", "bare", "small"))
    assert (spread.code, spread.plugin) == (Code.UNSCHEDULABLE, gpu_topology.NAME)
    assert spread.reasons == ("at most 2 usable GPU(s) in one GPU domain (NUMA node and NVLink domain); "
                              "the pod requires its 4 GPUs in one",)
    assert bare.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE and "does not describe its GPU topology" in bare.reasons[0]
    assert small.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE and "has 2 GPU(s)" in small.reasons[0]
    assert could_ever_fit(snapshot, resolve(pod, snapshot)).tolist() == [True, False, False]
    # once NUMA 0 of `spread` is free, the pod goes there, in one NUMA node
    snapshot.refund(0, (0, 1), 0, 0, 1000, 81920, 1)
    decision = place(snapshot, pod, policy_for("gpuplace", snapshot))
    assert (decision.node_name, decision.gpu_indices) == ("spread", (0, 1, 2, 3))


def test_required_changes_nothing_for_one_gpu():
    snapshot = ClusterSnapshot([dgx("bare", numa=None)])
    pod = make_pod("p").whole_gpus(1).topology("required").build()
    assert resolve(pod, snapshot).topology_required is False
    assert place(snapshot, pod, policy_for("bestfit", snapshot)).scheduled


@pytest.mark.parametrize("name", registry.names())
def test_a_cluster_without_topology_places_every_pod_as_before(name):
    """Each decision on nodes without topology equals the decision on the same nodes described as one domain
    each (every GPU in NUMA node 0): topology that cannot separate GPUs changes no choice."""
    rng = np.random.default_rng(7)
    nodes = [dgx(f"n{i}", *rng.choice([0, 300, 1000], size=8), numa=None) for i in range(6)]
    one_domain = [dgx(n.name, *(g.free_share_milli for g in n.gpus), numa=(0,) * 8) for n in nodes]
    pods = [make_pod(f"p{i}").cpu(1).whole_gpus(int(rng.integers(1, 5))).build() if rng.random() < 0.5 else
            make_pod(f"p{i}").cpu(1).gpu_share(int(rng.choice([200, 500]))).build() for i in range(30)]
    outcomes = []
    for cluster in (nodes, one_domain):
        snapshot = ClusterSnapshot(cluster)
        policy = policy_for(name, snapshot)
        placed = []
        for pod in pods:
            demand = resolve(pod, snapshot)
            decision = decide(snapshot, demand, policy)
            if decision.scheduled:
                bind(snapshot, demand, decision)
            placed.append((decision.node_name, decision.gpu_indices))
        outcomes.append(placed)
    assert outcomes[0] == outcomes[1]
    assert sum(node is not None for node, _ in outcomes[0]) >= 8  # most pods placed: the comparison means something


def test_a_node_describes_all_its_gpus_or_none():
    gpus = dgx("n").gpus
    half = Node("n", 1000, 1024, tuple(g if g.index < 4 else type(g)(g.index, g.model, g.memory_mib) for g in gpus))
    with pytest.raises(ValueError, match="some GPUs only"):
        ClusterSnapshot([half])


def test_reordering_rows_keeps_each_nodes_topology():
    snapshot = ClusterSnapshot([dgx("a", numa=None), dgx("b")])
    flipped = snapshot.reordered([1, 0])
    assert flipped.has_topology.tolist() == [True, False] and flipped.any_topology
    assert flipped.gpu_numa[0].tolist() == list(TWO_NUMA) and (flipped.gpu_domain[1] == -1).all()


def test_gpu_count_agrees_with_the_topology_lists():
    with pytest.raises(ValueError, match="numa names 3 GPU"):
        Node.with_gpus("n", 1000, 1024, 4, "H100", 81920, numa=(0, 0, 1))
    node = Node.with_gpus("n", 1000, 1024, 4, "H100", 81920, numa=(0, 0, 1, 1), nvlink=(0, 0, 0, 0))
    assert [(g.numa_node, g.nvlink_domain) for g in node.gpus] == [(0, 0), (0, 0), (1, 0), (1, 0)]
    with pytest.raises(ValueError, match="numa_node out of"):
        Node.with_gpus("n", 1000, 1024, 1, "H100", 81920, numa=(-1,))
