"""Exclusive (one pod per GPU) and latency_aware(base): where pods go, with the reasons."""

import numpy as np

from gpuplace.core.demand import resolve
from gpuplace.core.framework.interface import Code, PolicyContext
from gpuplace.core.framework.runtime import bind, decide, place
from gpuplace.core.gpu_load import GpuLoad
from gpuplace.core.latency.model import ClassProfile, LatencyModel, Stream, Tail
from gpuplace.core.model import GpuRequest, Node, Pod
from gpuplace.core.policies.baselines.best_fit import BestFit
from gpuplace.core.policies.exclusive import Exclusive
from gpuplace.core.policies.latency_aware import latency_aware
from gpuplace.core.snapshot import ClusterSnapshot

MODEL = LatencyModel(Tail(1.0, 2.0, 0.5), Tail(1.2, 2.0, 1.0), Tail(1.3, 2.5, 1.0),
                     classes={"det": ClassProfile(4.0, 0.5)})
V100, H100 = ("Tesla-V100-SXM2-16GB", 16384), ("NVIDIA-H100-80GB-HBM3", 81559)


def pod(name, memory_mib=2048, cpu=1000):
    return Pod(name, cpu, 1024, GpuRequest(1, memory_mib=memory_mib), deadline_ms=1000 / 30, frame_rate_hz=30.0,
               workload_class="det")


def snapshot_of(*nodes):
    return ClusterSnapshot([Node.with_gpus(name, 64000, 262144, n, model, mib) for name, n, (model, mib) in nodes])


def test_exclusive_takes_the_smallest_idle_gpu_and_never_shares():
    snapshot = snapshot_of(("h100", 2, H100), ("v100", 2, V100))
    policy = Exclusive(PolicyContext())
    placed = []
    for i in range(4):
        decision = place(snapshot, pod(f"p{i}"), policy)
        bind(snapshot, resolve(pod(f"p{i}"), snapshot), decision)
        placed.append((decision.node_name, decision.gpu_indices))
    # V100s first (16 GiB leaves less over than 80 GiB), then the H100s; one pod per GPU
    assert placed == [("v100", (0,)), ("v100", (1,)), ("h100", (0,)), ("h100", (1,))]
    decision = place(snapshot, pod("p4"), policy)
    assert not decision.scheduled
    assert "idle GPU" in decision.statuses["v100"].reasons[0]
    assert decision.statuses["v100"].code == Code.UNSCHEDULABLE


def test_latency_aware_keeps_the_base_choice_where_it_is_feasible_and_moves_it_where_not():
    # BestFit puts a shared pod on the GPU with the least free share: GPU 0 here, which holds 14 det
    # streams. A 15th gives W = 30 ms, p95 = 32 ms > 30 ms (33.3 ms less 10%), so GPU 1 instead.
    snapshot = snapshot_of(("h100", 2, H100))
    load = GpuLoad.for_snapshot(snapshot)
    streams = {}
    for i in range(14):
        p = pod(f"r{i}")
        demand = resolve(p, snapshot)
        bind(snapshot, demand, decide(snapshot, demand, BestFit(PolicyContext())))
        streams[p.name] = Stream.of(p)
        load.charge(p.name, 0, (0,), streams[p.name])
    assert (snapshot.free_share_milli[0] < 1000).tolist() == [True, False]
    policy = latency_aware(BestFit(PolicyContext()), MODEL, load, streams)
    new = pod("new")
    streams["new"] = Stream.of(new)
    demand = resolve(new, snapshot)
    assert BestFit(PolicyContext()).choose_gpus(snapshot, demand, 0) == (0,)
    assert decide(snapshot, demand, policy).gpu_indices == (1,)
    assert policy.name == "bestfit+latency"


def test_latency_aware_refuses_a_node_with_reasons_when_no_gpu_keeps_the_deadlines():
    snapshot = snapshot_of(("h100", 1, H100))
    load = GpuLoad.for_snapshot(snapshot)
    streams = {f"r{i}": Stream(30.0, "det", deadline_ms=1000 / 30) for i in range(14)}
    for name, stream in streams.items():
        load.charge(name, 0, (0,), stream)
    streams["new"] = Stream.of(pod("new"))
    decision = place(snapshot, pod("new"), latency_aware(BestFit(PolicyContext()), MODEL, load, streams))
    assert not decision.scheduled
    assert "predicted p95 32.0 ms > 30.0 ms" in decision.statuses["h100"].reasons[0]


def test_latency_aware_passes_pods_it_has_no_stream_for_to_the_base():
    snapshot = snapshot_of(("h100", 1, H100))
    load = GpuLoad.for_snapshot(snapshot)
    for i in range(20):
        load.charge(f"r{i}", 0, (0,), Stream(30.0, "det", deadline_ms=1000 / 30))
    policy = latency_aware(BestFit(PolicyContext()), MODEL, load, streams={})
    assert decide(snapshot, resolve(pod("batch"), snapshot), policy).scheduled
    assert np.array_equal(policy.filter(snapshot, resolve(pod("batch"), snapshot)), [True])


def test_latency_aware_follows_a_new_model():
    snapshot = snapshot_of(("h100", 1, H100))
    load = GpuLoad.for_snapshot(snapshot)
    streams = {f"r{i}": Stream(30.0, "det", deadline_ms=1000 / 30) for i in range(10)}
    for name, stream in streams.items():
        load.charge(name, 0, (0,), stream)
    streams["new"] = Stream.of(pod("new"))
    policy = latency_aware(BestFit(PolicyContext()), MODEL, load, streams)
    demand = resolve(pod("new"), snapshot)
    assert decide(snapshot, demand, policy).scheduled  # 11 x 2 ms: p95 24 ms
    policy.model = MODEL.with_class("det", ClassProfile(4.0, 1.0))  # 11 x 4 ms: load 1.32
    assert not decide(snapshot, demand, policy).scheduled
