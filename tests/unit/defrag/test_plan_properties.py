"""Invariants of every plan, whatever the cluster, the running pods, the limits and the history.

- a moved pod never has a higher priority or a tighter deadline than the beneficiary;
- the limits hold: victims per plan, cool-downs, moves per pod, per owner and fleet-wide per hour;
- every target is feasible: carrying the plan out on a copy (reserve, evict, bind) never over-commits;
- the same inputs give the same plan, in whatever order the running pods are listed.
"""

import math
from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplace.core.defrag.apply import apply_plan
from gpuplace.core.defrag.blockers import classify
from gpuplace.core.defrag.eligibility import HOUR_S
from gpuplace.core.defrag.model import Limits, PastMove, Plan, Refusal, slack_ms
from gpuplace.core.defrag.planner import plan
from gpuplace.core.demand import resolve
from gpuplace.core.framework.interface import PolicyContext
from gpuplace.core.model import MILLI_PER_GPU, GpuRequest, Node, Pod
from gpuplace.core.policies import registry
from gpuplace.core.workload import typical_workload

from .cluster import Cluster

MODELS = {"V100M16": 16384, "T4": 15360}
OWNERS = (None, "ReplicaSet/a", "ReplicaSet/b")
NOW_S = 100_000.0

requests = st.one_of(
    st.builds(GpuRequest, st.just(1), st.sampled_from([100, 250, 300, 450, 500, 700, 800, 1000])),
    st.builds(GpuRequest, st.integers(2, 3), st.just(MILLI_PER_GPU)),
    st.just(GpuRequest()),
)
big_requests = st.builds(GpuRequest, st.sampled_from([1, 1, 2]), st.sampled_from([700, 1000]))
pods = st.builds(
    Pod, name=st.just("p"), cpu_milli=st.sampled_from([0, 1000, 2000, 4000]),
    memory_mib=st.sampled_from([0, 1024, 8192]), gpu=requests, priority=st.integers(0, 2),
    deadline_ms=st.sampled_from([None, 20.0, 50.0, 100.0]),
)


@st.composite
def scenes(draw):
    """A cluster packed GPU by GPU with shared pods (holes left between them), a few pods on several
    GPUs or none, a beneficiary that is mostly large, limits and a history."""
    nodes = [Node.with_gpus(f"n{i}", draw(st.sampled_from([8, 16, 64])) * 1000, 65536, draw(st.integers(1, 4)),
                            model := draw(st.sampled_from(sorted(MODELS))), MODELS[model])
             for i in range(draw(st.integers(1, 4)))]
    cluster = Cluster(*nodes)
    count = 0
    for node in nodes:
        for gpu in range(len(node.gpus)):
            for share in draw(st.lists(st.sampled_from([100, 250, 300, 450, 500, 700]), min_size=1, max_size=3)):
                pod = replace(draw(pods), cpu_milli=draw(st.sampled_from([0, 1000])), gpu=GpuRequest(1, share))
                _try_run(draw, cluster, f"u{count}", pod, node.name, gpu)
                count += 1
    for pod in draw(st.lists(pods, max_size=4)):
        node = draw(st.sampled_from(nodes))
        free = cluster.snapshot.free_share_milli[cluster.snapshot.index_of(node.name)]
        gpus = [g for g in range(len(node.gpus)) if free[g] >= (pod.gpu.share_milli or 0)][: pod.gpu.count]
        if len(gpus) == (pod.gpu.count if pod.gpu.needs_gpu else 0):
            _try_run(draw, cluster, f"u{count}", pod, node.name, *(gpus if pod.gpu.needs_gpu else []))
            count += 1
    beneficiary = replace(draw(pods), name="beneficiary", gpu=draw(st.one_of(big_requests, big_requests, requests)))
    uids = [r.uid for r in cluster.running] or ["gone"]
    history = draw(st.lists(st.builds(PastMove, st.sampled_from(uids), st.sampled_from(OWNERS),
                                      st.floats(NOW_S - 2 * HOUR_S, NOW_S)), max_size=6))
    limits = Limits(max_victims_per_plan=draw(st.sampled_from([0, 1, 2, 3, 4, 4])),
                    pod_cooldown_s=draw(st.sampled_from([0.0, 600.0])),
                    max_moves_per_pod_per_hour=draw(st.integers(1, 3)),
                    max_evictions_per_owner_per_hour=draw(st.sampled_from([0, 1, 2, 4, 4, 4])),
                    max_evictions_per_hour=draw(st.sampled_from([0, 3, 5, 100, 100])),
                    max_chain_depth=draw(st.integers(0, 1)))
    return cluster, beneficiary, limits, history, draw(st.sampled_from(["bestfit", "fgd"]))


def _try_run(draw, cluster, uid, pod, node, *gpus):
    try:
        cluster.run(uid, replace(pod, name=f"p{uid}"), node, *gpus, owner=draw(st.sampled_from(OWNERS)),
                    restart_s=draw(st.sampled_from([0.0, 10.0, 60.0])))
    except ValueError:  # the GPU, CPU or memory would be over-committed: the pod is not there
        pass


def policy(name, cluster, beneficiary):
    pods = [r.pod for r in cluster.running] + [beneficiary]
    return registry.create(name, PolicyContext(workload=typical_workload(pods, cluster.snapshot.gpu_types)))


def in_hour(move):
    return 0 <= NOW_S - move.at_s < HOUR_S


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenes())
def test_a_plan_keeps_the_rule_the_limits_and_every_target_feasible(scene):
    cluster, beneficiary, limits, history, name = scene
    result = plan(cluster.snapshot, beneficiary, cluster.running, policy(name, cluster, beneficiary), limits,
                  history, NOW_S)
    if isinstance(result, Refusal):
        assert result.blocker is not None and result.reason
        return
    running = cluster.by_uid()
    moved = [running[m.uid] for m in result.moves]
    assert len({m.uid for m in result.moves}) == len(result.moves)
    for victim in moved:  # never sacrifice a higher priority or a tighter deadline
        assert victim.pod.priority <= beneficiary.priority
        assert slack_ms(victim.pod) >= slack_ms(beneficiary)
    if result.moves:
        assert len(result.moves) <= limits.max_victims_per_plan
        assert sum(map(in_hour, history)) + len(result.moves) <= limits.max_evictions_per_hour
    for owner in {v.owner for v in moved if v.owner is not None}:
        past = sum(1 for m in history if m.owner == owner and in_hour(m))
        assert past + sum(v.owner == owner for v in moved) <= limits.max_evictions_per_owner_per_hour
    for victim in moved:
        past = [m for m in history if m.uid == victim.uid and m.at_s <= NOW_S]
        assert all(NOW_S - m.at_s >= limits.pod_cooldown_s for m in past)
        assert sum(map(in_hour, past)) < limits.max_moves_per_pod_per_hour
    assert all(m.wave == 0 for m in result.moves) or limits.max_chain_depth >= 1
    demand = resolve(beneficiary, cluster.snapshot)
    assert len(result.gpu_indices) == (demand.gpu_count if demand.needs_gpu else 0)
    after = cluster.snapshot.copy()
    apply_plan(after, result, beneficiary, running)  # raises on any over-commit, at any step
    assert (after.free_share_milli >= 0).all() and (after.free_memory_mib >= 0).all()
    assert (after.cpu_free_milli >= 0).all() and (after.memory_free_mib >= 0).all()
    used = MILLI_PER_GPU * after.gpu_count.sum() - after.free_share_milli.sum()
    # allocated GPU share grows by exactly the beneficiary's: moves only shift share around
    before = MILLI_PER_GPU * cluster.snapshot.gpu_count.sum() - cluster.snapshot.free_share_milli.sum()
    assert used == before + result.share_milli * len(result.gpu_indices) + sum(
        m.share_milli * len(m.to_gpu_indices) - running[m.uid].share_milli * len(running[m.uid].gpu_indices)
        for m in result.moves)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenes(), st.randoms(use_true_random=False))
def test_the_same_inputs_give_the_same_plan_in_any_order(scene, rng):
    cluster, beneficiary, limits, history, name = scene
    first = plan(cluster.snapshot, beneficiary, cluster.running, policy(name, cluster, beneficiary), limits, history,
                 NOW_S)
    shuffled = list(cluster.running)
    rng.shuffle(shuffled)
    again = plan(cluster.snapshot, beneficiary, shuffled, policy(name, cluster, beneficiary), limits, history, NOW_S)
    assert first == again


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenes())
def test_a_refusal_names_the_blocker_classify_sees_and_only_fragmentation_gets_moves(scene):
    cluster, beneficiary, limits, history, name = scene
    blocker = classify(cluster.snapshot, beneficiary, policy(name, cluster, beneficiary))
    result = plan(cluster.snapshot, beneficiary, cluster.running, policy(name, cluster, beneficiary), limits,
                  history, NOW_S)
    if isinstance(result, Refusal):
        assert result.blocker is blocker
    elif result.moves:
        assert blocker.value == "fragmentation"
    else:
        assert blocker.value == "none"
    assert not math.isnan(result.cost if isinstance(result, Plan) else 0.0)
    assert np.isfinite(cluster.snapshot.free_share_milli).all()
