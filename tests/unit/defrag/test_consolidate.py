"""Consolidation (core/defrag/consolidate.py): with no pod blocked, the move that lowers stranded GPU memory most.

Node a, 2 x V100M16 (16384 MiB each); typical workload: half whole-GPU pods, half 300m slices. Every pod
restarts in 30 s: one move costs 31 s (cost.py).
"""

import numpy as np
import pytest

from gpuplace.core.defrag.apply import apply_moves
from gpuplace.core.defrag.consolidate import consolidate
from gpuplace.core.defrag.model import Limits, PastMove
from gpuplace.core.fragmentation import stranded_gpu_memory
from gpuplace.core.framework.interface import PolicyContext
from gpuplace.core.policies import registry
from gpuplace.core.workload import typical_workload

from ..core.builders import make_node, make_pod
from .cluster import Cluster

NOW_S = 10_000.0
SLICE = make_pod("slice").cpu(1).gpu_share(300).build()
WHOLE = make_pod("whole").cpu(1).whole_gpus(1).build()


def bestfit():
    return registry.create("bestfit", PolicyContext())


def split_slices(*, owner: str | None = None) -> Cluster:
    """p1 on GPU 0 and p2 on GPU 1, 300m each: neither GPU can take a whole-GPU pod."""
    cluster = Cluster(make_node("a").cpu(32).gpus(2).build())
    cluster.run("p1", make_pod("p1").cpu(1).gpu_share(300).build(), "a", 0, owner=owner)
    cluster.run("p2", make_pod("p2").cpu(1).gpu_share(300).build(), "a", 1, owner=owner)
    return cluster


def workload(cluster: Cluster):
    return typical_workload([SLICE, WHOLE], cluster.snapshot.gpu_types)


def stranded(cluster: Cluster) -> float:
    return float(stranded_gpu_memory(cluster.snapshot, workload(cluster)).sum())


def test_two_slices_on_two_gpus_are_put_together_and_the_gain_is_what_the_measure_says():
    cluster = split_slices()
    before = stranded(cluster)
    # whole-GPU shape (p = 1/2): no GPU has 1000m free, it does not fit, so all 2 x 11468 MiB free are stranded;
    # slice shape (p = 1/2): fits, both 700m holes take 300m, nothing stranded
    assert before == pytest.approx(0.5 * 2 * (16384 - 300 * 16384 // 1000))
    found = consolidate(cluster.snapshot, cluster.running, bestfit(), workload(cluster), Limits(), (), NOW_S,
                        min_gain_mib=1024)
    assert found is not None and found.cost == 31.0
    move = found.move
    # p1 joins p2 on GPU 1 or p2 joins p1 on GPU 0 (same gain, same cost): the first candidate found wins
    assert (move.uid, move.to_node, move.to_gpu_indices) == ("p1", "a", (1,))
    apply_moves(cluster.snapshot, (move,), cluster.by_uid())
    # after: GPU 0 empty, so the whole-GPU shape fits; GPU 1's 400m hole (6554 MiB) is too small for it
    assert cluster.snapshot.free_share_milli[0].tolist() == [1000, 400]
    assert stranded(cluster) == pytest.approx(before - found.gain_mib)
    assert found.gain_mib > 1024


def test_no_move_when_none_gains_the_margin():
    cluster = split_slices()
    packed = Cluster(make_node("a").cpu(32).gpus(2).build())
    packed.run("p1", make_pod("p1").cpu(1).gpu_share(300).build(), "a", 0)
    packed.run("p2", make_pod("p2").cpu(1).gpu_share(300).build(), "a", 0)
    # already together: moving either pod apart only strands more
    assert consolidate(packed.snapshot, packed.running, bestfit(), workload(packed), Limits(), (), NOW_S,
                       min_gain_mib=0.0) is None
    # split: the gain exists, but under a margin above it nothing moves
    gain = before_gain(cluster)
    assert consolidate(cluster.snapshot, cluster.running, bestfit(), workload(cluster), Limits(), (), NOW_S,
                       min_gain_mib=gain + 1) is None


def before_gain(cluster: Cluster) -> float:
    found = consolidate(cluster.snapshot, cluster.running, bestfit(), workload(cluster), Limits(), (), NOW_S,
                        min_gain_mib=0.0)
    assert found is not None
    return found.gain_mib


def test_resting_pods_and_spent_hourly_caps_are_respected():
    cluster = split_slices(owner="ReplicaSet/r")
    wl = workload(cluster)

    def ask(limits: Limits, history: tuple[PastMove, ...], keep: int = 0):
        return consolidate(cluster.snapshot, cluster.running, bestfit(), wl, limits, history, NOW_S,
                           min_gain_mib=1024, keep_evictions=keep)

    # p1 moved 5 minutes ago: within its 10-minute cool-down, so p2 is the one that moves
    found = ask(Limits(), (PastMove("p1", "ReplicaSet/r", NOW_S - 300),))
    assert found is not None and found.move.uid == "p2"
    # both resting: nothing moves
    both = (PastMove("p1", None, NOW_S - 300), PastMove("p2", None, NOW_S - 300))
    assert ask(Limits(), both) is None
    # the owner's hourly cap spent (by other pods of it, long out of their cool-downs)
    owner_spent = (PastMove("x", "ReplicaSet/r", NOW_S - 1800), PastMove("y", "ReplicaSet/r", NOW_S - 1800))
    assert ask(Limits(max_evictions_per_owner_per_hour=2), owner_spent) is None
    # the cluster's hourly cap: 3 evictions made, cap 4, one kept for blocked pods: none left to consolidate
    others = tuple(PastMove(f"x{i}", None, NOW_S - 1800) for i in range(3))
    assert ask(Limits(max_evictions_per_hour=4), others, keep=1) is None
    assert ask(Limits(max_evictions_per_hour=4), others, keep=0) is not None


def test_a_pod_may_move_to_another_node_and_both_nodes_are_priced():
    cluster = Cluster(make_node("a").cpu(32).gpus(1).build(), make_node("b").cpu(32).gpus(1).build())
    cluster.run("p1", make_pod("p1").cpu(1).gpu_share(300).build(), "a", 0)
    cluster.run("p2", make_pod("p2").cpu(1).gpu_share(500).build(), "b", 0)
    wl = workload(cluster)
    before = float(stranded_gpu_memory(cluster.snapshot, wl).sum())
    found = consolidate(cluster.snapshot, cluster.running, bestfit(), wl, Limits(), (), NOW_S, min_gain_mib=1024)
    assert found is not None
    apply_moves(cluster.snapshot, (found.move,), cluster.by_uid())
    after = float(stranded_gpu_memory(cluster.snapshot, wl).sum())
    assert after == pytest.approx(before - found.gain_mib) and after < before
    # one node emptied: a whole GPU free
    assert np.sort(cluster.snapshot.free_share_milli[:, 0]).tolist() == [200, 1000]
