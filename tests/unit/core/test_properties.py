"""Invariants of placement, whatever the cluster, the pods and the policy (hypothesis)."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplace.core.demand import resolve
from gpuplace.core.framework.interface import PolicyContext
from gpuplace.core.framework.runtime import bind, decide
from gpuplace.core.model import MILLI_PER_GPU, Gpu, GpuRequest, Node, Pod
from gpuplace.core.policies import registry
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.core.workload import typical_workload
from gpuplace.sim import simulator

MODELS = {"V100M16": 16384, "T4": 15360, "V100M32": 32768}


@st.composite
def nodes(draw):
    count = draw(st.integers(1, 5))
    out = []
    for i in range(count):
        model = draw(st.sampled_from(sorted(MODELS)))
        memory = MODELS[model]
        gpus = tuple(
            Gpu(g, model, memory, free, free * memory // MILLI_PER_GPU)
            for g, free in enumerate(draw(st.lists(st.integers(0, 1000), max_size=4)))
        )
        out.append(Node(f"n{i}", draw(st.integers(1, 64)) * 1000, draw(st.integers(1, 64)) * 1024, gpus))
    return out


requests = st.one_of(
    st.just(GpuRequest()),
    st.builds(GpuRequest, st.just(1), st.integers(1, 1000)),
    st.builds(GpuRequest, st.integers(1, 4), st.just(1000)),
    st.builds(GpuRequest, st.just(1), st.none(), st.integers(1, 32768)),
    st.builds(GpuRequest, st.just(1), st.integers(1, 999), st.none(),
              st.lists(st.sampled_from(sorted(MODELS)), max_size=2).map(tuple)),
)


@st.composite
def pods(draw):
    return [
        Pod(f"p{i}", draw(st.integers(0, 16)) * 500, draw(st.integers(0, 16)) * 512, draw(requests))
        for i in range(draw(st.integers(1, 25)))
    ]


def _place_all(cluster, workload_pods, policy_name, seed):
    snapshot = ClusterSnapshot(cluster)
    workload = typical_workload(workload_pods, snapshot.gpu_types)
    policy = registry.create(policy_name, PolicyContext(workload, np.random.default_rng(seed)))
    decisions = []
    for pod in workload_pods:
        demand = resolve(pod, snapshot)
        before = {k: v.copy() for k, v in vars(snapshot).items() if isinstance(v, np.ndarray)}
        decision = decide(snapshot, demand, policy)
        for key, value in before.items():  # deciding never changes the cluster
            assert np.array_equal(value, getattr(snapshot, key)), key
        if decision.scheduled:
            assert policy.filter(snapshot, demand)[decision.node]  # never an infeasible node
            bind(snapshot, demand, decision)
        decisions.append((decision.node_name, decision.gpu_indices))
    return snapshot, decisions


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(nodes(), pods(), st.sampled_from(registry.PAPER_POLICIES), st.integers(0, 2**16))
def test_no_gpu_cpu_or_memory_is_ever_over_committed(cluster, workload_pods, policy_name, seed):
    snapshot, _ = _place_all(cluster, workload_pods, policy_name, seed)
    exists = snapshot.gpu_exists
    assert ((snapshot.free_share_milli >= 0) & (snapshot.free_share_milli <= MILLI_PER_GPU))[exists].all()
    assert (snapshot.free_memory_mib >= 0).all()
    assert (snapshot.free_memory_mib <= snapshot.gpu_memory_mib[:, None]).all()
    assert ((snapshot.cpu_free_milli >= 0) & (snapshot.cpu_free_milli <= snapshot.cpu_capacity_milli)).all()
    assert ((snapshot.memory_free_mib >= 0) & (snapshot.memory_free_mib <= snapshot.memory_capacity_mib)).all()


@SETTINGS
@given(nodes(), pods(), st.sampled_from(registry.PAPER_POLICIES), st.integers(0, 2**16))
def test_same_seed_same_decisions(cluster, workload_pods, policy_name, seed):
    assert _place_all(cluster, workload_pods, policy_name, seed)[1] == \
        _place_all(cluster, workload_pods, policy_name, seed)[1]


@SETTINGS
@given(nodes(), pods(), st.sampled_from(registry.PAPER_POLICIES), st.integers(0, 2**16))
def test_a_dropped_pod_changes_nothing(cluster, workload_pods, policy_name, seed):
    snapshot, decisions = _place_all(cluster, workload_pods, policy_name, seed)
    # replaying only the placed pods reaches the same cluster: the dropped ones left no trace
    placed = [p for p, (node, _) in zip(workload_pods, decisions, strict=True) if node is not None]
    replay = ClusterSnapshot(cluster)
    for pod, (node, gpus) in zip(placed, [d for d in decisions if d[0] is not None], strict=True):
        demand = resolve(pod, replay)
        bind(replay, demand, decide_at(replay, demand, node, gpus))
    assert np.array_equal(replay.free_share_milli, snapshot.free_share_milli)
    assert np.array_equal(replay.cpu_free_milli, snapshot.cpu_free_milli)
    assert np.array_equal(replay.memory_free_mib, snapshot.memory_free_mib)


def decide_at(snapshot, demand, node_name, gpus):
    from gpuplace.core.framework.runtime import Decision

    return Decision(demand.pod_name, snapshot.index_of(node_name), node_name, gpus)


@settings(max_examples=15, deadline=None)
@given(nodes(), pods(), st.sampled_from(registry.PAPER_POLICIES), st.integers(0, 2**16))
def test_the_simulator_is_a_function_of_its_seed(cluster, workload_pods, policy_name, seed):
    if not any(n.gpus for n in cluster):
        cluster = cluster + [Node.with_gpus("gpu", 8000, 8192, 1, "T4", 15360)]
    one = simulator.run(cluster, workload_pods, policy_name, seed)
    two = simulator.run(cluster, workload_pods, policy_name, seed)
    assert np.array_equal(one.allocated_milli, two.allocated_milli)
    assert np.array_equal(one.arrived_milli, two.arrived_milli)
    assert one.failed_by_shape == two.failed_by_shape
