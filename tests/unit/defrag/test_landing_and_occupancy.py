"""Where a pod could land (landing.py) and the running-pod arrays it reads (occupancy.py)."""

import numpy as np
import pytest

from gpuplace.core.defrag.landing import lands_elsewhere
from gpuplace.core.defrag.model import RunningPod
from gpuplace.core.defrag.occupancy import Occupancy

from ..core.builders import make_node, make_pod
from .cluster import Cluster


def landing(cluster):
    occupancy = Occupancy.of(cluster.snapshot, cluster.running)
    flags = lands_elsewhere(cluster.snapshot, occupancy, np.arange(len(occupancy.pods)))
    return {r.uid: bool(flags[occupancy.slot_of(r.uid)]) for r in cluster.running}


def test_a_pod_lands_on_another_node_or_on_other_gpus_of_its_own_but_not_on_its_own_gpu():
    cluster = Cluster(make_node("a").cpu(32).gpus(2).build(), make_node("b").cpu(32).gpus(1).build())
    cluster.run("p1", make_pod("p1").gpu_share(500).build(), "a", 0)  # a: GPU 0 500m free
    cluster.run("p2", make_pod("p2").gpu_share(400).build(), "a", 1)  # a: GPU 1 600m free
    cluster.run("q1", make_pod("q1").gpu_share(800).build(), "b", 0)  # b: 200m free
    # p1 (500m): a/GPU 1 has 600m -> yes; p2 (400m): a/GPU 0 has 500m -> yes;
    # q1 (800m): 200m on its own GPU does not count, a's GPUs have 500m and 600m -> no
    assert landing(cluster) == {"p1": True, "p2": True, "q1": False}


def test_a_second_copy_needs_cpu_on_its_own_node_and_a_cpu_only_pod_never_moves_home():
    cluster = Cluster(make_node("a").cpu(8).gpus(2).build())
    cluster.run("p1", make_pod("p1").cpu(6).gpu_share(300).build(), "a", 0)  # 2 cores left
    cluster.run("c1", make_pod("c1").cpu(1).build(), "a")  # 1 core left
    # p1 fits GPU 1 by share but a second copy needs 6 cores (1 free); c1 has no other node
    assert landing(cluster) == {"p1": False, "c1": False}


def test_occupancy_reuses_slots_and_never_offers_a_pod_on_an_unknown_node():
    cluster = Cluster(make_node("a").cpu(32).gpus(2).build())
    occupancy = Occupancy(cluster.snapshot)
    pod = make_pod("p").gpu_share(300).build()
    occupancy.add(RunningPod("u1", pod, "a", (1,), 300, 4915))
    occupancy.add(RunningPod("u2", pod, "gone", (0,), 300, 4915))
    assert occupancy.node[:2].tolist() == [0, -1] and occupancy.gpus[0].tolist() == [False, True]
    with pytest.raises(ValueError):
        occupancy.add(RunningPod("u1", pod, "a", (0,), 300, 4915))
    assert occupancy.remove("u1").uid == "u1"
    occupancy.add(RunningPod("u3", pod, "a", (0,), 300, 4915))
    assert occupancy.slot_of("u3") == 0 and len(occupancy) == 2
    assert sorted(r.uid for r in occupancy) == ["u2", "u3"]
    assert occupancy.request_id[0] == occupancy.request_id[1]  # equal requests share one id
