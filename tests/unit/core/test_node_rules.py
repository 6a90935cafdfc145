"""Node rules with kube-scheduler's semantics, case by case.

Every row cites the upstream code it mirrors, read in the module cache of the stack's own Kubernetes build
(k8s.io/kubernetes v1.34.4, k8s.io/api v0.34.4, k8s.io/component-helpers v0.34.4, k8s.io/kube-scheduler v0.34.4).
"""

from __future__ import annotations

import numpy as np
import pytest

from gpuplace.core.demand import resolve
from gpuplace.core.filters import node_rules as node_rules_filter
from gpuplace.core.framework.interface import Code, Policy, PolicyContext
from gpuplace.core.framework.runtime import bind, decide
from gpuplace.core.model import Node, Pod
from gpuplace.core.node_rules import (
    MSG_AFFINITY,
    MSG_PORTS,
    MSG_TAINTS,
    MSG_TOO_MANY_PODS,
    MSG_UNSCHEDULABLE,
    HostPort,
    NodeFacts,
    PodRules,
    Requirement,
    SelectorTerm,
    Taint,
    Toleration,
)
from gpuplace.core.policies import registry
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.core.workload import typical_workload

GPU = {"gpu": "a100"}


def term(*reqs: Requirement, fields: tuple[Requirement, ...] = ()) -> SelectorTerm:
    return SelectorTerm(tuple(reqs), fields)


NODE = NodeFacts("n1", labels={"zone": "a", "gpu": "a100", "rank": "5"})

# (case, node facts, pod rules, expected reason or None)
STATIC_CASES = [
    # nodeunschedulable/node_unschedulable.go Filter: Spec.Unschedulable refuses unless the pod tolerates
    # node.kubernetes.io/unschedulable:NoSchedule.
    ("cordoned", NodeFacts("n1", unschedulable=True), PodRules(), MSG_UNSCHEDULABLE),
    ("cordoned, tolerated", NodeFacts("n1", unschedulable=True),
     PodRules(tolerations=(Toleration("node.kubernetes.io/unschedulable", "Exists", "", "NoSchedule"),)), None),
    # tainttoleration/taint_toleration.go Filter: DoNotScheduleTaintsFilterFunc keeps NoSchedule and NoExecute.
    ("NoSchedule taint", NodeFacts("n1", taints=(Taint("gpu", "true", "NoSchedule"),)), PodRules(), MSG_TAINTS),
    ("NoExecute taint", NodeFacts("n1", taints=(Taint("gpu", "true", "NoExecute"),)), PodRules(), MSG_TAINTS),
    ("PreferNoSchedule is only a score", NodeFacts("n1", taints=(Taint("gpu", "true", "PreferNoSchedule"),)),
     PodRules(), None),
    # k8s.io/api core/v1 toleration.go ToleratesTaint: Equal compares the value, Exists ignores it, an empty
    # key with Exists tolerates every key, an empty effect every effect.
    ("Equal, same value", NodeFacts("n1", taints=(Taint("gpu", "true", "NoSchedule"),)),
     PodRules(tolerations=(Toleration("gpu", "Equal", "true", "NoSchedule"),)), None),
    ("Equal, other value", NodeFacts("n1", taints=(Taint("gpu", "true", "NoSchedule"),)),
     PodRules(tolerations=(Toleration("gpu", "Equal", "false", "NoSchedule"),)), MSG_TAINTS),
    ("Exists ignores the value", NodeFacts("n1", taints=(Taint("gpu", "true", "NoSchedule"),)),
     PodRules(tolerations=(Toleration("gpu", "Exists"),)), None),
    ("empty key + Exists tolerates all", NodeFacts("n1", taints=(Taint("a", "1", "NoExecute"),)),
     PodRules(tolerations=(Toleration("", "Exists"),)), None),
    ("effect must match when given", NodeFacts("n1", taints=(Taint("gpu", "true", "NoExecute"),)),
     PodRules(tolerations=(Toleration("gpu", "Exists", "", "NoSchedule"),)), MSG_TAINTS),
    # Not Ready: the node lifecycle controller's node.kubernetes.io/not-ready:NoSchedule (TaintNodesByCondition).
    ("not Ready", NodeFacts("n1", ready=False), PodRules(), MSG_TAINTS),
    ("not Ready, tolerated", NodeFacts("n1", ready=False),
     PodRules(tolerations=(Toleration("node.kubernetes.io/not-ready", "Exists"),)), None),
    # nodeaffinity/node_affinity.go Filter (ErrReasonPod): nodeSelector labels must all match ...
    ("nodeSelector matches", NODE, PodRules(node_selector=(("zone", "a"),)), None),
    ("nodeSelector misses", NODE, PodRules(node_selector=(("zone", "b"),)), MSG_AFFINITY),
    # ... and one of the required terms (component-helpers nodeaffinity.go: terms ORed, requirements ANDed,
    # operators as apimachinery labels.Requirement.Matches).
    ("In", NODE, PodRules(required_terms=(term(Requirement("zone", "In", ("a", "b"))),)), None),
    ("NotIn, label absent", NODE, PodRules(required_terms=(term(Requirement("x", "NotIn", ("a",))),)), None),
    ("NotIn, value listed", NODE, PodRules(required_terms=(term(Requirement("zone", "NotIn", ("a",))),)),
     MSG_AFFINITY),
    ("DoesNotExist", NODE, PodRules(required_terms=(term(Requirement("zone", "DoesNotExist")),)), MSG_AFFINITY),
    ("Gt on an integer label", NODE, PodRules(required_terms=(term(Requirement("rank", "Gt", ("4",))),)), None),
    ("Lt on an integer label", NODE, PodRules(required_terms=(term(Requirement("rank", "Lt", ("5",))),)),
     MSG_AFFINITY),
    ("Gt on a non-integer label", NODE, PodRules(required_terms=(term(Requirement("zone", "Gt", ("1",))),)),
     MSG_AFFINITY),
    ("terms are ORed", NODE, PodRules(required_terms=(term(Requirement("zone", "In", ("b",))),
                                                      term(Requirement("gpu", "Exists")))), None),
    ("requirements are ANDed", NODE, PodRules(required_terms=(
        term(Requirement("zone", "In", ("a",)), Requirement("gpu", "In", ("h100",))),)), MSG_AFFINITY),
    ("matchFields metadata.name", NODE,
     PodRules(required_terms=(term(fields=(Requirement("metadata.name", "In", ("n1",)),)),)), None),
    ("matchFields other name", NODE,
     PodRules(required_terms=(term(fields=(Requirement("metadata.name", "In", ("n2",)),)),)), MSG_AFFINITY),
    # component-helpers nodeaffinity.go: "nil or empty term selects no objects".
    ("empty term", NODE, PodRules(required_terms=(SelectorTerm(),)), MSG_AFFINITY),
    # noderesources/fit.go fitsRequest: an extended resource the node does not have at all.
    ("MIG profile absent", NODE, PodRules(extended=(("nvidia.com/mig-1g.10gb", 1),)),
     "Insufficient nvidia.com/mig-1g.10gb"),
    # apimachinery v0.37.2 labels/selector.go Requirement.Matches: Gt/Lt read both sides with
    # strconv.ParseInt(_, 10, 64): "_", spaces and values past int64 are not integers; a sign would parse, but
    # NewRequirement also checks every value as a label value, which may not start with one.
    ("Gt: a signed operand is no label value", NODE,
     PodRules(required_terms=(term(Requirement("rank", "Gt", ("+4",))),)), MSG_AFFINITY),
    ("Gt: a plain operand", NODE, PodRules(required_terms=(term(Requirement("rank", "Gt", ("4",))),)), None),
    ("Gt: an operand with _ is no integer to kube", NodeFacts("n1", labels={"rank": "11"}),
     PodRules(required_terms=(term(Requirement("rank", "Gt", ("1_0",))),)), MSG_AFFINITY),
    ("Gt: a label with _ is no integer to kube", NodeFacts("n1", labels={"rank": "1_0"}),
     PodRules(required_terms=(term(Requirement("rank", "Gt", ("5",))),)), MSG_AFFINITY),
    ("Lt: an operand past int64", NODE,
     PodRules(required_terms=(term(Requirement("rank", "Lt", ("9223372036854775808",))),)), MSG_AFFINITY),
    ("Lt: the largest int64", NODE,
     PodRules(required_terms=(term(Requirement("rank", "Lt", ("9223372036854775807",))),)), None),
    # labels.NewRequirement (which component-helpers v0.37.2 nodeaffinity.go nodeSelectorRequirementsAsSelector
    # calls) refuses a value that is not a label value; newNodeSelectorTerm keeps the error and the term matches
    # no node, whatever its other requirements say.
    ("NotIn a value that is no label value drops the term", NODE,
     PodRules(required_terms=(term(Requirement("zone", "NotIn", ("a b",))),)), MSG_AFFINITY),
    ("a dropped term leaves the others", NODE, PodRules(required_terms=(
        term(Requirement("zone", "NotIn", ("a b",))), term(Requirement("zone", "In", ("a",))))), None),
    # nodeSelectorRequirementsAsFieldSelector: In/NotIn with exactly one value, else the term is dropped.
    ("matchFields In with two names", NODE,
     PodRules(required_terms=(term(fields=(Requirement("metadata.name", "In", ("n1", "n2")),)),)), MSG_AFFINITY),
    # NewLazyErrorNodeSelector: "nil or empty term selects no objects", beside a term that matches.
    ("an empty term beside one that matches", NODE,
     PodRules(required_terms=(term(), term(Requirement("gpu", "In", ("a100",))))), None),
    ("an empty term beside one that does not", NODE,
     PodRules(required_terms=(term(), term(Requirement("gpu", "In", ("v100",))))), MSG_AFFINITY),
]


@pytest.mark.parametrize(("facts", "rules", "expected"), [c[1:] for c in STATIC_CASES],
                         ids=[c[0] for c in STATIC_CASES])
def test_static_rule(facts: NodeFacts, rules: PodRules, expected: str | None) -> None:
    assert rules.static_reason(facts) == expected


# kube-scheduler framework/types.go HostPortInfo.CheckConflict (an empty hostIP is 0.0.0.0).
PORT_CASES = [
    ("same port, both wildcard", HostPort(8080), HostPort(8080), True),
    ("other protocol", HostPort(8080, "UDP"), HostPort(8080, "TCP"), False),
    ("wildcard against an address", HostPort(8080, "TCP", "0.0.0.0"), HostPort(8080, "TCP", "10.0.0.1"), True),
    ("two different addresses", HostPort(8080, "TCP", "10.0.0.1"), HostPort(8080, "TCP", "10.0.0.2"), False),
    ("same address", HostPort(8080, "TCP", "10.0.0.1"), HostPort(8080, "TCP", "10.0.0.1"), True),
    ("other port", HostPort(8080), HostPort(8081), False),
]


@pytest.mark.parametrize(("a", "b", "conflict"), [c[1:] for c in PORT_CASES], ids=[c[0] for c in PORT_CASES])
def test_host_port_conflict(a: HostPort, b: HostPort, conflict: bool) -> None:
    assert a.conflicts(b) is conflict and b.conflicts(a) is conflict


def create(name: str, snapshot: ClusterSnapshot | None = None) -> Policy:
    workload = typical_workload([Pod("p", 1000, 1024)], snapshot.gpu_types) if snapshot is not None else None
    return registry.create(name, PolicyContext(workload=workload))


def _cluster(*facts: NodeFacts) -> ClusterSnapshot:
    nodes = [Node.with_gpus(f.name, 16000, 65536, 2, "A100", 40960) for f in facts]
    return ClusterSnapshot(nodes, facts)


def test_slots_ports_and_countables_are_taken_and_given_back() -> None:
    # n1 has room for 2 pods and one MIG slice; the pod wants host port 80 and the slice.
    snapshot = _cluster(NodeFacts("n1", extended={"nvidia.com/mig-1g.10gb": 1}))
    snapshot.pods_free[0] = 2
    rules = PodRules(host_ports=(HostPort(80),), extended=(("nvidia.com/mig-1g.10gb", 1),))
    demand = resolve(Pod("web", 1000, 1024, rules=rules), snapshot)
    assert node_rules_filter.mask(snapshot, demand).tolist() == [True]

    snapshot.charge(0, (), 1000, 1024, 0, 0, 0, rules)  # 1 slot left, port 80 taken, no slice left
    assert node_rules_filter.mask(snapshot, demand).tolist() == [False]
    assert node_rules_filter.status(snapshot, demand, 0).reasons == (MSG_PORTS,)
    other_port = resolve(Pod("api", 1000, 1024, rules=PodRules(host_ports=(HostPort(81),))), snapshot)
    assert node_rules_filter.mask(snapshot, other_port).tolist() == [True]
    snapshot.charge(0, (), 1000, 1024, 0, 0, 0, other_port.rules)  # 0 slots left
    plain = resolve(Pod("plain", 1, 1), snapshot)
    status = node_rules_filter.status(snapshot, plain, 0)
    assert (status.code, status.reasons) == (Code.UNSCHEDULABLE, (MSG_TOO_MANY_PODS,))

    snapshot.refund(0, (), 1000, 1024, 0, 0, 0, rules)
    snapshot.refund(0, (), 1000, 1024, 0, 0, 0, other_port.rules)
    assert int(snapshot.pods_free[0]) == 2 and snapshot.host_ports_used[0] == []
    assert int(snapshot.extended_free["nvidia.com/mig-1g.10gb"][0]) == 1


def test_a_rule_failure_is_unresolvable_so_defragmentation_never_plans_there() -> None:
    snapshot = _cluster(NodeFacts("n1", taints=(Taint("dedicated", "infra", "NoSchedule"),)))
    status = node_rules_filter.status(snapshot, resolve(Pod("p", 1000, 1024), snapshot), 0)
    assert (status.code, status.reasons) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (MSG_TAINTS,))


def test_a_bare_snapshot_limits_nothing() -> None:
    # The trace harness builds snapshots without facts: every node open, slots unlimited.
    snapshot = ClusterSnapshot([Node.with_gpus("n1", 16000, 65536, 2, "A100", 40960)])
    demand = resolve(Pod("p", 1000, 1024, rules=PodRules(node_selector=(("zone", "b"),))), snapshot)
    assert node_rules_filter.mask(snapshot, demand).tolist() == [True]


def test_preferred_affinity_breaks_ties_only() -> None:
    # Two idle, equal nodes score the same; the preferred term (weight 10) picks n2 over the first node n1.
    facts = [NodeFacts("n1", labels={"zone": "a"}), NodeFacts("n2", labels={"zone": "b"})]
    snapshot = _cluster(*facts)
    prefers_b = PodRules(preferred_terms=((10, term(Requirement("zone", "In", ("b",)))),))
    decision = decide(snapshot, resolve(Pod("p", 1000, 1024, rules=prefers_b), snapshot), create("bestfit"))
    assert decision.node_name == "n2"
    # With 8 cores taken on n1, BestFit scores n1 higher (less left over): the score wins over the preference.
    snapshot.charge(0, (), 8000, 0, 0, 0, 0)
    decision = decide(snapshot, resolve(Pod("p", 1000, 1024, rules=prefers_b), snapshot), create("bestfit"))
    assert decision.node_name == "n1"


def test_static_masks_are_cached_per_rules_and_never_mutated_by_filters() -> None:
    snapshot = _cluster(NodeFacts("n1"), NodeFacts("n2", unschedulable=True))
    demand = resolve(Pod("p", 1000, 1024), snapshot)
    first = snapshot.static_mask(demand.rules)
    create("fgd", snapshot).filter(snapshot, demand)  # DefaultSteps.filter ANDs masks in place
    assert first is snapshot.static_mask(demand.rules)
    assert first.tolist() == [True, False]
    np.testing.assert_array_equal(node_rules_filter.mask(snapshot, demand), [True, False])


def test_bind_takes_the_pods_slot() -> None:
    snapshot = _cluster(NodeFacts("n1"))
    snapshot.pods_free[0] = 1
    demand = resolve(Pod("p", 1000, 1024), snapshot)
    decision = decide(snapshot, demand, create("fgd", snapshot))
    assert decision.node_name == "n1"
    bind(snapshot, demand, decision)
    assert int(snapshot.pods_free[0]) == 0
    refused = decide(snapshot, demand, create("fgd", snapshot), explain=True)
    assert not refused.scheduled and refused.statuses["n1"].reasons == (MSG_TOO_MANY_PODS,)
