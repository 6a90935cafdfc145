"""The house policy's time loss (issue 42): what placing a pod with a deadline on a GPU takes from the time the
arriving streams could use there, and how the latency-aware wrapper hands the policy what it needs.

Arithmetic as in tests/unit/latency: p95 = 2 + 2n ms for n det streams at 30 fps, budget 30 ms: 14 fit."""

import numpy as np
import pytest

from gpuplace.core.demand import resolve
from gpuplace.core.filters.latency_room import GpuTime
from gpuplace.core.framework.interface import PolicyContext
from gpuplace.core.framework.runtime import decide
from gpuplace.core.gpu_load import GpuLoad
from gpuplace.core.latency.model import ClassProfile, LatencyModel, Stream, Tail
from gpuplace.core.model import GpuRequest, Node, Pod
from gpuplace.core.policies.gpuplace import policy as gpuplace_policy
from gpuplace.core.policies.gpuplace.policy import Gpuplace
from gpuplace.core.policies.gpuplace.time_loss import StreamMix, TimeLoss
from gpuplace.core.policies.latency_aware import latency_aware
from gpuplace.core.snapshot import ClusterSnapshot

MODEL = LatencyModel(Tail(1.0, 2.0, 0.5), Tail(1.2, 2.0, 1.0), Tail(1.3, 2.5, 1.0),
                     classes={"det": ClassProfile(4.0, 0.5)})
DET = Stream(30.0, "det", deadline_ms=1000 / 30)
H100 = "NVIDIA-H100-80GB-HBM3"


def _cluster(gpus: int) -> tuple[ClusterSnapshot, GpuLoad]:
    snapshot = ClusterSnapshot([Node.with_gpus("n0", 64000, 262144, gpus, H100, 81920)])
    return snapshot, GpuLoad.for_snapshot(snapshot)


def _fill(load: GpuLoad, gpu: int, n: int) -> None:
    for i in range(n):
        load.charge(f"r{gpu}-{i}", 0, (gpu,), DET)


def _loss(load: GpuLoad, mix: StreamMix) -> np.ndarray:
    terms, weights = mix.terms(MODEL, 0.1)
    loss = TimeLoss(GpuTime("new", DET, load, MODEL), terms, weights)
    return loss.of(np.zeros(3, dtype=np.int64), np.arange(3))


def test_a_gpu_the_pod_nearly_fills_loses_less_than_one_it_closes_to_the_mix():
    _, load = _cluster(3)
    _fill(load, 0, 12)  # with the pod: 13; one more det still fits (14), so the mix loses nothing of det here
    _fill(load, 1, 13)  # with the pod: 14; no more det fits -- it had room for one before
    mix = StreamMix()
    mix.observe(DET)
    assert _loss(load, mix).tolist() == [0.0, 1.0, 0.0]  # GPU 2 is empty: room for 13 more after it


def test_the_mix_weighs_streams_by_what_arrives_and_forgets_slowly():
    mix = StreamMix(half_life=1.0)
    heavy = Stream(60.0, "det", service_ms=10.0, deadline_ms=50.0)
    mix.observe(heavy)
    mix.observe(DET)
    mix.observe(DET)
    terms, weights = mix.terms(MODEL, 0.1)
    assert len(terms) == 2 and weights.sum() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="half_life"):
        StreamMix(half_life=0)


def test_the_wrapper_hands_the_policy_the_stream_of_a_pod_with_a_frame_rate_and_nothing_for_others():
    snapshot, load = _cluster(2)
    base = Gpuplace(PolicyContext())
    told: list[GpuTime | None] = []
    original = base.use_gpu_time

    def spy(time: GpuTime | None) -> None:
        told.append(time)
        original(time)

    base.use_gpu_time = spy  # type: ignore[method-assign]
    policy = latency_aware(base, MODEL, load, {"cam": DET})
    cam = Pod("cam", 1000, 1024, GpuRequest(count=1, memory_mib=2048), frame_rate_hz=30.0)
    batch = Pod("batch", 1000, 1024, GpuRequest(count=1, memory_mib=2048))
    assert decide(snapshot, resolve(cam, snapshot), policy).scheduled
    assert told and all(t is not None and t.pod_name == "cam" and t.stream == DET for t in told)
    told.clear()
    assert decide(snapshot, resolve(batch, snapshot), policy).scheduled
    assert told and all(t is None for t in told)


def test_with_a_time_weight_the_pod_goes_where_it_takes_the_least_time_from_the_mix(monkeypatch):
    snapshot, load = _cluster(3)
    for gpu, n in ((0, 12), (1, 13)):
        for i in range(n):
            snapshot.charge(0, (gpu,), 10, 10, 25, 2048, 1, None)
            load.charge(f"r{gpu}-{i}", 0, (gpu,), DET)
    pods = {f"c{i}": DET for i in range(20)}
    monkeypatch.setattr(gpuplace_policy, "TIME_WEIGHT_MILLI", 1000.0)
    base = Gpuplace(PolicyContext())
    policy = latency_aware(base, MODEL, load, pods)
    decision = decide(snapshot, resolve(Pod("c0", 10, 10, GpuRequest(count=1, memory_mib=2048),
                                            frame_rate_hz=30.0), snapshot), policy)
    assert decision.gpu_indices == (0,)  # GPU 1 would lose its last det's room; GPU 2 is a whole GPU
    monkeypatch.setattr(gpuplace_policy, "TIME_WEIGHT_MILLI", 0.0)
    off = decide(snapshot, resolve(Pod("c1", 10, 10, GpuRequest(count=1, memory_mib=2048), frame_rate_hz=30.0),
                                   snapshot), latency_aware(Gpuplace(PolicyContext()), MODEL, load, pods))
    assert off.gpu_indices == (1,)  # memory alone: the smallest hole, which closes GPU 1 to the mix
