"""One placement: a decision with node and GPUs, or the reasons it cannot be placed."""

import numpy as np
import pytest

from gpuplace.core.demand import resolve
from gpuplace.core.framework.interface import Code, PolicyContext
from gpuplace.core.framework.runtime import Decision, bind, place
from gpuplace.core.policies import registry
from gpuplace.core.snapshot import ClusterSnapshot

from .builders import make_node, make_pod


@pytest.fixture
def snapshot():
    return ClusterSnapshot([
        make_node("v100").cpu(32).gpus(2, "V100M16", 16384).free(500, 500).build(),
        make_node("t4").cpu(8).gpus(1, "T4", 15360).build(),
    ])


def policy():
    return registry.create("bestfit", PolicyContext())


def test_a_robotics_pod_asking_memory_is_placed_and_charged_in_both_units(snapshot):
    pod = make_pod("slam").cpu(4).gpu_memory_mib(9420).build()
    decision = place(snapshot, pod, policy())
    # V100s have 500m (8192 MiB) free each < 9420 MiB; the T4 has 15360 MiB: it goes there
    assert (decision.node_name, decision.gpu_indices) == ("t4", (0,))
    assignment = bind(snapshot, resolve(pod, snapshot), decision)
    # 9420 MiB of 15360 MiB = 9420 * 1000 // 15360 = 613 milli
    assert assignment.memory_mib == (9420,) and assignment.share_milli == (613,)
    assert snapshot.free_memory_mib[1, 0] == 15360 - 9420
    assert snapshot.free_share_milli[1, 0] == 1000 - 613


def test_a_pod_blocked_by_fragmentation_gets_resolvable_reasons(snapshot):
    pod = make_pod("big").cpu(4).gpu_share(600, models=("V100M16",)).build()
    decision = place(snapshot, pod, policy())
    assert not decision.scheduled and decision.resolvable
    v100 = decision.statuses["v100"]
    assert v100.code == Code.UNSCHEDULABLE and "largest hole 500m" in v100.reasons[0]
    assert decision.statuses["t4"].code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def test_a_pod_no_node_can_ever_take_is_unresolvable(snapshot):
    decision = place(snapshot, make_pod("huge").cpu(4).whole_gpus(4).build(), policy())
    assert not decision.scheduled and not decision.resolvable
    assert "needs 4 x" in decision.statuses["v100"].reasons[0]


def test_cpu_and_memory_reasons(snapshot):
    decision = place(snapshot, make_pod("cpu").cpu(48).memory_mib(1024).build(), policy())
    assert decision.statuses["t4"].code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert "insufficient CPU" in decision.statuses["v100"].reasons[0]


def test_bind_refuses_what_would_over_commit(snapshot):
    demand = resolve(make_pod("p").cpu(4).gpu_share(600).build(), snapshot)
    with pytest.raises(ValueError):
        bind(snapshot, demand, Decision("p", 0, "v100", (0,)))
    with pytest.raises(ValueError):
        bind(snapshot, demand, Decision("p"))
    assert snapshot.free_share_milli[0].tolist() == [500, 500]  # unchanged


def test_refund_returns_what_charge_took(snapshot):
    before = snapshot.free_share_milli.copy()
    snapshot.charge(1, [0], 1000, 512, 300, 4608, 0)
    snapshot.refund(1, [0], 1000, 512, 300, 4608, 0)
    assert np.array_equal(before, snapshot.free_share_milli)
    with pytest.raises(ValueError):
        snapshot.refund(1, [0], 1000, 512, 300, 4608, 0)


def test_unknown_policy_names_are_refused_with_the_known_ones():
    with pytest.raises(registry.UnknownPolicy, match="known: random"):
        registry.create("bogus", PolicyContext())


def test_adding_a_policy_is_one_registry_entry(monkeypatch):
    from gpuplace.core.policies.default_steps import DefaultSteps

    class FirstFit(DefaultSteps):
        name = "first-fit"

        def __init__(self, context):
            pass

        def score(self, snapshot, demand, candidates):
            return np.zeros(len(candidates))

    monkeypatch.setitem(registry.POLICIES, "first-fit", FirstFit)
    assert registry.create("first-fit", PolicyContext()).name == "first-fit"
