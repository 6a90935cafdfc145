"""The rules every pod relies on, with kube-scheduler's semantics: which nodes a pod may use at all.

A second scheduler must agree with kube-scheduler on every rule it does not improve on, so each check below
mirrors one kube-scheduler filter plugin and says so (k8s.io/kubernetes v1.34, pkg/scheduler/framework/plugins,
and k8s.io/component-helpers for the selector and toleration helpers):

| check                 | kube-scheduler plugin   | reason reported (kube's wording)                                 |
|-----------------------|-------------------------|------------------------------------------------------------------|
| cordoned node         | NodeUnschedulable       | node(s) were unschedulable                                       |
| not Ready             | TaintToleration*        | node(s) had untolerated taint(s)                                 |
| taints                | TaintToleration         | node(s) had untolerated taint(s)                                 |
| nodeSelector/affinity | NodeAffinity            | node(s) didn't match Pod's node affinity/selector                |
| host ports            | NodePorts               | node(s) didn't have free ports for the requested pod ports       |
| pod slots, countables | NodeResourcesFit        | Too many pods / Insufficient <resource>                          |
| GPU share enforcement | (gpuplace's own)        | node(s) didn't enforce the pod's GPU share (...)                 |

*kube-scheduler never reads the Ready condition: the node lifecycle controller turns it into the
`node.kubernetes.io/not-ready:NoSchedule` taint (TaintNodesByCondition). gpuplace adds that taint itself to a
node that is not Ready, so tolerations apply exactly as they would there.

Static rules (labels, taints, cordon) depend only on the pod's rules and the node's facts, so they are
evaluated once per distinct `PodRules` and snapshot (`StaticReasons`: each node's reason, and from it the mask);
slots, ports and countables change as pods are charged and are read from the snapshot's arrays on every call.
Pure: stdlib and NumPy only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from gpuplace.core.arrays import BoolArray, IntArray

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE = "NoSchedule", "PreferNoSchedule", "NoExecute"

MSG_UNSCHEDULABLE = "node(s) were unschedulable"
MSG_TAINTS = "node(s) had untolerated taint(s)"
MSG_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
MSG_PORTS = "node(s) didn't have free ports for the requested pod ports"
MSG_TOO_MANY_PODS = "Too many pods"
MSG_ABSENT = "node(s) left the cluster (kept for the pods still bound there)"
MSG_UNENFORCED = "node(s) didn't enforce the pod's GPU share (nothing there limits its GPU memory)"
GPU_ENFORCEMENT_LABEL = "gpuplace.io/gpu-enforcement"  # stored by gpuplace (usecases/enforcement), not in kube
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_LABEL_VALUE_MAX = 63
_GO_INT = re.compile(r"[+-]?[0-9]+")  # strconv.ParseInt(s, 10, 64): a sign and ASCII digits, no "_", no space
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")  # apimachinery IsValidLabelValue


def go_int64(text: str) -> int | None:
    """`text` as Go's strconv.ParseInt(text, 10, 64) reads it, None where that fails. Python's int() would also
    take "1_0", " 5", non-ASCII digits and values past int64, which kube refuses."""
    if not _GO_INT.fullmatch(text):
        return None
    value = int(text)
    return value if _INT64_MIN <= value <= _INT64_MAX else None


@dataclass(frozen=True)
class Requirement:
    """`key operator values` (NodeSelectorRequirement); operators In, NotIn, Exists, DoesNotExist, Gt, Lt."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    @cached_property
    def valid(self) -> bool:
        """Whether kube turns it into a label requirement at all (apimachinery labels.NewRequirement, which
        component-helpers' nodeSelectorRequirementsAsSelector calls): In/NotIn need values, Exists/DoesNotExist
        none, Gt/Lt one int64; every value must be a valid label value. The apiserver checks only the counts, so
        a pod may carry `NotIn ["a b"]` or `Gt ["1_0"]`: kube-scheduler then drops the whole term (its parse
        error is collected, the term matches no node), and so does SelectorTerm.matches."""
        counts_ok = {"In": bool(self.values), "NotIn": bool(self.values), "Exists": not self.values,
                     "DoesNotExist": not self.values, "Gt": len(self.values) == 1, "Lt": len(self.values) == 1}
        if not counts_ok.get(self.operator, False):
            return False
        if self.operator in ("Gt", "Lt") and go_int64(self.values[0]) is None:
            return False
        return all(len(v) <= _LABEL_VALUE_MAX and _LABEL_VALUE.fullmatch(v) for v in self.values)

    @cached_property
    def valid_field(self) -> bool:
        """As a matchFields requirement: In or NotIn with exactly one value (component-helpers
        nodeSelectorRequirementsAsFieldSelector); anything else drops the term."""
        return self.operator in ("In", "NotIn") and len(self.values) == 1

    def matches(self, labels: Mapping[str, str]) -> bool:
        # apimachinery labels.Requirement.Matches; Gt/Lt compare strconv.ParseInt(_, 10, 64) of both sides.
        present = self.key in labels
        if self.operator == "In":
            return present and labels[self.key] in self.values
        if self.operator == "NotIn":
            return not present or labels[self.key] not in self.values
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if self.operator in ("Gt", "Lt") and present and len(self.values) == 1:
            have, bound = go_int64(labels[self.key]), go_int64(self.values[0])
            if have is None or bound is None:
                return False
            return have > bound if self.operator == "Gt" else have < bound
        return False


@dataclass(frozen=True)
class SelectorTerm:
    """A NodeSelectorTerm: all expressions on labels and all field requirements (metadata.name) hold.

    An empty term matches no node (component-helpers: "nil or empty term matches no objects"), and neither does
    one with a requirement kube cannot parse (see Requirement.valid).
    """

    match_expressions: tuple[Requirement, ...] = ()
    match_fields: tuple[Requirement, ...] = ()

    @cached_property
    def usable(self) -> bool:
        """Not empty, and every requirement parses (component-helpers newLazyErrorNodeSelector keeps only those)."""
        return bool(self.match_expressions or self.match_fields) and all(r.valid for r in self.match_expressions) \
            and all(r.valid_field for r in self.match_fields)

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        if not self.usable:
            return False
        fields = {"metadata.name": name}
        return all(r.matches(labels) for r in self.match_expressions) and \
            all(r.matches(fields) for r in self.match_fields)


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        # k8s.io/api/core/v1 Toleration.ToleratesTaint: empty effect matches all effects, empty key with
        # Exists matches all keys, Exists ignores the value, Equal compares it.
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.operator in ("Equal", "") and self.value == taint.value


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = NO_SCHEDULE


@dataclass(frozen=True)
class HostPort:
    port: int
    protocol: str = "TCP"
    host_ip: str = ""

    def conflicts(self, other: HostPort) -> bool:
        # kube-scheduler framework HostPortInfo.CheckConflict: same protocol and port, and either side on
        # 0.0.0.0 (an empty hostIP is 0.0.0.0) or both on the same address.
        if self.port != other.port or self.protocol != other.protocol:
            return False
        wildcard = ("", "0.0.0.0")
        return self.host_ip in wildcard or other.host_ip in wildcard or self.host_ip == other.host_ip


@dataclass(frozen=True)
class PodRules:
    """What a pod says about the nodes it may use; the empty value asks for nothing but tolerates nothing."""

    node_selector: tuple[tuple[str, str], ...] = ()
    required_terms: tuple[SelectorTerm, ...] = ()  # ORed; empty: no required affinity
    preferred_terms: tuple[tuple[int, SelectorTerm], ...] = ()  # (weight, term)
    tolerations: tuple[Toleration, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    extended: tuple[tuple[str, int], ...] = ()  # countable resources (MIG profiles, ...) and how many
    # A GPU share: the node enforcements (GPU_ENFORCEMENT_LABEL values) that confine it; empty: any node
    gpu_enforcement: tuple[str, ...] = ()

    def static_reason(self, node: NodeFacts) -> str | None:
        """Why the pod may never use `node` as it is (kube's UnschedulableAndUnresolvable), or None."""
        if not node.present:
            return MSG_ABSENT
        if node.unschedulable and not any(t.tolerates(_CORDON) for t in self.tolerations):
            return MSG_UNSCHEDULABLE
        for taint in node.effective_taints:
            if taint.effect in (NO_SCHEDULE, NO_EXECUTE) and not any(t.tolerates(taint) for t in self.tolerations):
                return MSG_TAINTS
        labels = node.labels
        if any(labels.get(k) != v for k, v in self.node_selector):
            return MSG_AFFINITY
        if self.required_terms and not any(t.matches(node.name, labels) for t in self.required_terms):
            return MSG_AFFINITY
        for name, _ in self.extended:
            if name not in node.extended:
                return f"Insufficient {name}"
        if self.gpu_enforcement and labels.get(GPU_ENFORCEMENT_LABEL) not in self.gpu_enforcement:
            return MSG_UNENFORCED
        return None

    def preference(self, node: NodeFacts) -> int:
        """Sum of the weights of the preferred terms `node` matches (NodeAffinity's score before normalising)."""
        return sum(w for w, term in self.preferred_terms if term.matches(node.name, node.labels))


NO_RULES = PodRules()
_CORDON = Taint(UNSCHEDULABLE_TAINT, "", NO_SCHEDULE)
_NOT_READY = Taint(NOT_READY_TAINT, "", NO_SCHEDULE)


@dataclass(frozen=True)
class NodeFacts:
    """What the node's object says, beyond capacity: labels, taints, cordon, readiness, countables."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True
    extended: Mapping[str, int] = field(default_factory=dict)  # allocatable countables by name
    present: bool = True  # False: deleted from the cluster, kept only for what its pods still hold there

    @property
    def effective_taints(self) -> tuple[Taint, ...]:
        """The node's taints plus not-ready:NoSchedule when it is not Ready (see the module docstring)."""
        if self.ready or any(t.key == NOT_READY_TAINT for t in self.taints):
            return self.taints
        return (*self.taints, _NOT_READY)


@dataclass(frozen=True, eq=False)
class StaticReasons:
    """Why each node's facts refuse a pod's rules: `code[row]` indexes `texts`, -1 where they allow it.

    The mask and the reasons are one computation (one `static_reason` per node), so the NodeRules filter's
    verdict and its explanation can never disagree, and a reason costs a lookup."""

    code: IntArray  # (n_nodes,)
    texts: tuple[str, ...]
    allowed: BoolArray  # code < 0, (n_nodes,); shared by every caller: never written

    @classmethod
    def of(cls, facts: Sequence[NodeFacts], rules: PodRules) -> StaticReasons:
        texts: dict[str, int] = {}
        code = np.fromiter(
            (-1 if (reason := rules.static_reason(f)) is None else texts.setdefault(reason, len(texts))
             for f in facts), dtype=np.int64, count=len(facts))
        return cls(code, tuple(texts), code < 0)


def static_mask(facts: Sequence[NodeFacts], rules: PodRules) -> BoolArray:
    """Nodes whose static facts allow `rules`, (n_nodes,)."""
    return StaticReasons.of(facts, rules).allowed


def preference(facts: Sequence[NodeFacts], rules: PodRules) -> IntArray | None:
    """Preferred-affinity weight per node, (n_nodes,); None when the pod prefers nothing."""
    if not rules.preferred_terms:
        return None
    return np.fromiter((rules.preference(f) for f in facts), dtype=np.int64, count=len(facts))


def ports_free(used: Sequence[HostPort], wanted: Sequence[HostPort]) -> bool:
    return not any(w.conflicts(u) for w in wanted for u in used)


__all__ = [
    "Requirement", "SelectorTerm", "Toleration", "Taint", "HostPort", "PodRules", "NodeFacts", "NO_RULES",
    "StaticReasons", "static_mask", "preference", "ports_free", "UNSCHEDULABLE_TAINT", "NOT_READY_TAINT",
    "MSG_UNSCHEDULABLE", "MSG_TAINTS", "MSG_AFFINITY", "MSG_PORTS", "MSG_TOO_MANY_PODS", "MSG_ABSENT", "MSG_UNENFORCED",
    "GPU_ENFORCEMENT_LABEL", "NO_SCHEDULE",
    "PREFER_NO_SCHEDULE", "NO_EXECUTE", "go_int64",
]
