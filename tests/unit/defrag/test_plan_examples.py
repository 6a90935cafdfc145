"""Hand-worked plans: small clusters whose arithmetic is written out above each expectation.

Policy: bestfit (a shared pod takes the usable GPU with the least free share). Every pod restarts in
30 s, so one move costs 1 s overhead + 30 s = 31 s (cost.py) unless it has a deadline.
"""

from dataclasses import replace

import numpy as np
import pytest

from gpuplace.core.defrag.apply import apply_plan
from gpuplace.core.defrag.blockers import classify
from gpuplace.core.defrag.model import Blocker, Limits, Move, PastMove, Plan, Refusal
from gpuplace.core.defrag.planner import plan
from gpuplace.core.framework.interface import PolicyContext
from gpuplace.core.policies import registry

from ..core.builders import make_node, make_pod
from .cluster import Cluster

NOW_S = 10_000.0
WHOLE_GPU = make_pod("train").cpu(1).whole_gpus(1).build()


def bestfit():
    return registry.create("bestfit", PolicyContext())


def two_gpu_node(p1_deadline_ms=None, p2_deadline_ms=None, p2_priority=0, owner=None) -> Cluster:
    """Node a, 2 x V100M16: p1 holds 500m of GPU 0, p2 300m of GPU 1; free 500m and 700m."""
    cluster = Cluster(make_node("a").cpu(32).gpus(2).build())
    p1 = replace(make_pod("p1").cpu(1).gpu_share(500).build(), deadline_ms=p1_deadline_ms)
    p2 = replace(make_pod("p2").cpu(1).gpu_share(300).build(), deadline_ms=p2_deadline_ms, priority=p2_priority)
    cluster.run("p1", p1, "a", 0, owner=owner)
    cluster.run("p2", p2, "a", 1, owner=owner)
    return cluster


def test_moving_one_small_pod_to_the_other_gpu_opens_a_whole_gpu():
    cluster = two_gpu_node()
    # free 500 + 700 = 1200m >= 1000m in total, but no GPU has 1000m: fragmentation
    assert classify(cluster.snapshot, WHOLE_GPU, bestfit()) is Blocker.FRAGMENTATION
    result = plan(cluster.snapshot, WHOLE_GPU, cluster.running, bestfit(), Limits(), (), NOW_S)
    # clear GPU 1 by moving p2 (300m) into GPU 0's 500m, or GPU 0 by moving p1 (500m) into GPU 1's 700m:
    # both cost one move, 31 s; p2 displaces less (300m < 500m), so p2 moves
    assert isinstance(result, Plan)
    assert result.moves == (Move("p2", "a", (1,), "a", (0,), 300, 300 * 16384 // 1000, 31.0),)
    assert (result.node, result.gpu_indices, result.share_milli, result.cost) == ("a", (1,), 1000, 31.0)
    apply_plan(cluster.snapshot, result, WHOLE_GPU, cluster.by_uid())
    # GPU 0: 1000 - 500 (p1) - 300 (p2) = 200m free; GPU 1: the new pod's
    assert cluster.snapshot.free_share_milli[0].tolist() == [200, 0]


def test_a_tighter_deadline_is_never_moved_for_a_looser_one():
    beneficiary = replace(WHOLE_GPU, deadline_ms=50.0)
    # p2 (20 ms) is tighter than the beneficiary (50 ms): only p1 (no deadline) may move, into GPU 1's 700m
    cluster = two_gpu_node(p2_deadline_ms=20.0)
    result = plan(cluster.snapshot, beneficiary, cluster.running, bestfit(), Limits(), (), NOW_S)
    assert isinstance(result, Plan)
    assert [(m.uid, m.to_gpu_indices) for m in result.moves] == [("p1", (1,))]
    assert result.gpu_indices == (0,)
    # both tighter: nothing may move
    cluster = two_gpu_node(p1_deadline_ms=40.0, p2_deadline_ms=20.0)
    refused = plan(cluster.snapshot, beneficiary, cluster.running, bestfit(), Limits(), (), NOW_S)
    assert isinstance(refused, Refusal) and refused.blocker is Blocker.FRAGMENTATION
    assert "no node can be cleared" in refused.reason


def test_a_higher_priority_pod_is_never_moved():
    cluster = two_gpu_node(p2_priority=10)
    result = plan(cluster.snapshot, WHOLE_GPU, cluster.running, bestfit(), Limits(), (), NOW_S)
    assert [m.uid for m in result.moves] == ["p1"]


def test_a_deadline_makes_a_move_dearer():
    # p2 with an 80 ms deadline: 1 + 30 + 30 * 100 / 80 = 68.5 s; p1 without: 31 s -- p1 moves
    cluster = two_gpu_node(p2_deadline_ms=80.0)
    result = plan(cluster.snapshot, replace(WHOLE_GPU, deadline_ms=80.0), cluster.running, bestfit(), Limits(), (),
                  NOW_S)
    assert [m.uid for m in result.moves] == ["p1"] and result.cost == 31.0


def test_capacity_is_refused():
    cluster = Cluster(make_node("a").cpu(32).gpus(2).build())
    cluster.run("p1", make_pod("p1").gpu_share(800).build(), "a", 0)
    cluster.run("p2", make_pod("p2").gpu_share(800).build(), "a", 1)
    # free 200 + 200 = 400m < 1000m: no move can help
    assert classify(cluster.snapshot, WHOLE_GPU, bestfit()) is Blocker.CAPACITY
    refused = plan(cluster.snapshot, WHOLE_GPU, cluster.running, bestfit(), Limits(), (), NOW_S)
    assert refused == Refusal(Blocker.CAPACITY, "not enough free GPU in total on the 1 usable nodes")


@pytest.mark.parametrize("pod", [
    make_pod("a100").whole_gpus(1, models=("A100",)).build(),  # no node has the model
    make_pod("wide").whole_gpus(4).build(),  # every node has 2 GPUs
    make_pod("fat").cpu(64).whole_gpus(1).build(),  # every node has 32 cores
])
def test_a_pod_no_node_could_ever_take_is_refused_as_a_constraint(pod):
    cluster = two_gpu_node()
    assert classify(cluster.snapshot, pod, bestfit()) is Blocker.CONSTRAINT
    refused = plan(cluster.snapshot, pod, cluster.running, bestfit(), Limits(), (), NOW_S)
    assert refused.blocker is Blocker.CONSTRAINT and refused.reason.startswith("no node could ever take it")


def test_a_pod_that_fits_gets_a_plan_without_moves():
    cluster = two_gpu_node()
    small = make_pod("small").gpu_share(400).build()
    assert classify(cluster.snapshot, small, bestfit()) is Blocker.NONE
    result = plan(cluster.snapshot, small, cluster.running, bestfit(), Limits(), (), NOW_S)
    # best fit: GPU 0 has 500m free, GPU 1 700m: the least free that fits is GPU 0
    assert (result.moves, result.gpu_indices, result.cost) == ((), (0,), 0.0)


class _LatencyBlocked:
    """A policy whose latency filter rejects every node (what policies/latency_aware.py exposes)."""

    name = "stub+latency"

    def __init__(self):
        self.base = bestfit()

    def filter(self, snapshot, demand):
        return np.zeros(snapshot.n_nodes, dtype=bool)

    def check(self, snapshot, demand):
        return object()


def test_room_rejected_by_the_latency_filter_is_latency():
    cluster = two_gpu_node()
    small = make_pod("small").gpu_share(400).build()
    assert classify(cluster.snapshot, small, _LatencyBlocked()) is Blocker.LATENCY
    refused = plan(cluster.snapshot, small, cluster.running, _LatencyBlocked(), Limits(), (), NOW_S)
    assert refused.blocker is Blocker.LATENCY


def test_cooldown_keeps_a_recently_moved_pod_in_place():
    cluster = two_gpu_node()
    # p2 moved 60 s ago, cool-down 600 s: p1 moves instead
    history = [PastMove("p2", None, NOW_S - 60)]
    result = plan(cluster.snapshot, WHOLE_GPU, cluster.running, bestfit(), Limits(), history, NOW_S)
    assert [m.uid for m in result.moves] == ["p1"]
    # p2 moved twice within the hour (cap 2), the last 700 s ago (cool-down over): still capped
    history = [PastMove("p2", None, NOW_S - 1800), PastMove("p2", None, NOW_S - 700)]
    result = plan(cluster.snapshot, WHOLE_GPU, cluster.running, bestfit(), Limits(), history, NOW_S)
    assert [m.uid for m in result.moves] == ["p1"]


def test_owner_and_fleet_caps_refuse_a_plan():
    cluster = two_gpu_node(owner="ReplicaSet/web")
    # two evictions of ReplicaSet/web in the last hour, cap 2: none of its pods may go
    history = [PastMove("x", "ReplicaSet/web", NOW_S - 100), PastMove("y", "ReplicaSet/web", NOW_S - 200)]
    refused = plan(cluster.snapshot, WHOLE_GPU, cluster.running, bestfit(), Limits(), history, NOW_S)
    assert isinstance(refused, Refusal)
    # an hour and more ago no longer counts
    history = [replace(m, at_s=m.at_s - 3600) for m in history]
    assert isinstance(plan(cluster.snapshot, WHOLE_GPU, cluster.running, bestfit(), Limits(), history, NOW_S), Plan)
    # all evictions in the history, whoever's: 3 in the hour with a cap of 3
    fleet = [PastMove(f"z{i}", None, NOW_S - 10 * i) for i in range(3)]
    refused = plan(cluster.snapshot, WHOLE_GPU, cluster.running, bestfit(), Limits(max_evictions_per_hour=3), fleet,
                   NOW_S)
    assert refused == Refusal(Blocker.FRAGMENTATION, "eviction limits reached: no pod may be moved now")


def two_pods_in_the_way() -> Cluster:
    """b: 1 GPU with q1 300m + q2 300m (400m free); c: 2 GPUs each with a 700m pod (300m free each)."""
    cluster = Cluster(make_node("b").cpu(32).gpus(1).build(), make_node("c").cpu(32).gpus(2).build())
    cluster.run("q1", make_pod("q1").gpu_share(300).build(), "b", 0)
    cluster.run("q2", make_pod("q2").gpu_share(300).build(), "b", 0)
    cluster.run("r1", make_pod("r1").gpu_share(700).build(), "c", 0)
    cluster.run("r2", make_pod("r2").gpu_share(700).build(), "c", 1)
    return cluster


def test_two_pods_move_when_one_is_not_enough_and_max_victims_caps_it():
    cluster = two_pods_in_the_way()
    # b's GPU needs 600m more: q1 and q2 both go, one into each 300m hole of c (r1, r2 fit nowhere)
    result = plan(cluster.snapshot, WHOLE_GPU, cluster.running, bestfit(), Limits(), (), NOW_S)
    assert sorted((m.uid, m.to_node) for m in result.moves) == [("q1", "c"), ("q2", "c")]
    assert {m.to_gpu_indices for m in result.moves} == {(0,), (1,)}
    assert (result.node, result.cost) == ("b", 62.0)
    refused = plan(cluster.snapshot, WHOLE_GPU, cluster.running, bestfit(), Limits(max_victims_per_plan=1), (),
                   NOW_S)
    assert isinstance(refused, Refusal)


def chain_cluster() -> Cluster:
    """a: 8 cores, 1 GPU with p1 (500m, 4 cores); b: 1 GPU with q1 (300m, 6 cores) + q2 (250m);
    d: 1 GPU with s1 (750m). Free: a 500m / 4 cores, b 450m, d 250m."""
    cluster = Cluster(make_node("a").cpu(8).gpus(1).build(), make_node("b").cpu(32).gpus(1).build(),
                      make_node("d").cpu(32).gpus(1).build())
    cluster.run("p1", make_pod("p1").cpu(4).gpu_share(500).build(), "a", 0)
    cluster.run("q1", make_pod("q1").cpu(6).gpu_share(300).build(), "b", 0)
    cluster.run("q2", make_pod("q2").cpu(1).gpu_share(250).build(), "b", 0)
    cluster.run("s1", make_pod("s1").cpu(1).gpu_share(750).build(), "d", 0)
    return cluster


def test_a_chain_moves_a_small_pod_into_a_hole_so_a_bigger_one_can_follow():
    cluster = chain_cluster()
    beneficiary = make_pod("train").cpu(4).whole_gpus(1).build()
    # no pod has a place now: p1 (500m) fits neither b (450m) nor d (250m); q1 (300m, 6 cores) fits
    # neither a (4 cores free) nor d; s1 (750m) fits nowhere
    refused = plan(cluster.snapshot, beneficiary, cluster.running, bestfit(), Limits(), (), NOW_S)
    assert isinstance(refused, Refusal) and refused.blocker is Blocker.FRAGMENTATION
    # one level of chain: q2 (250m) into d's 250m hole, then p1 into b's 450 + 250 = 700m, then a is free
    result = plan(cluster.snapshot, beneficiary, cluster.running, bestfit(), Limits(max_chain_depth=1), (), NOW_S)
    assert [(m.uid, m.to_node, m.wave) for m in result.moves] == [("q2", "d", 0), ("p1", "b", 1)]
    assert (result.node, result.cost) == ("a", 62.0)
    # the waves matter: all at once, p1 would be reserved on b before q2 left it (450m < 500m)
    with pytest.raises(ValueError):
        apply_plan(cluster.snapshot.copy(), replace(result, moves=tuple(replace(m, wave=0) for m in result.moves)),
                   beneficiary, cluster.by_uid())
    apply_plan(cluster.snapshot, result, beneficiary, cluster.by_uid())
    assert cluster.snapshot.free_share_milli[:, 0].tolist() == [0, 1000 - 300 - 500, 0]


def test_apply_is_all_or_nothing():
    cluster = two_gpu_node()
    before = cluster.snapshot.free_share_milli.copy()
    # p2 to GPU 0 (500m free) is fine, but the beneficiary then asks GPU 0 as well: refused, all undone
    bad = Plan("train", "a", (0,), 1000, 16384, (Move("p2", "a", (1,), "a", (0,), 300, 4915, 31.0),), 31.0)
    with pytest.raises(ValueError):
        apply_plan(cluster.snapshot, bad, WHOLE_GPU, cluster.by_uid())
    assert (cluster.snapshot.free_share_milli == before).all()
