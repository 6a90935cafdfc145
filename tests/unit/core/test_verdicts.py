"""Filter verdicts (issue 16): each filter runs once per decision, reasons are built only for the nodes that fail and
only when read, and they are, node by node, what the per-node implementation said (statuses_oracle.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import numpy as np
import pytest

from gpuplace.core.demand import resolve
from gpuplace.core.filters import FILTERS, latency_fit
from gpuplace.core.framework.interface import Code, PolicyContext, Status
from gpuplace.core.framework.runtime import bind, decide, place
from gpuplace.core.framework.verdicts import CycleState, Verdict, distinct
from gpuplace.core.gpu_load import GpuLoad
from gpuplace.core.latency.model import DEFAULT_MODEL, Stream
from gpuplace.core.model import GpuRequest, Pod
from gpuplace.core.node_rules import HostPort, NodeFacts, PodRules, Taint, Toleration
from gpuplace.core.policies import default_steps
from gpuplace.core.policies.baselines.best_fit import BestFit
from gpuplace.core.policies.baselines.random_fit import RandomFit
from gpuplace.core.policies.exclusive import Exclusive
from gpuplace.core.policies.latency_aware import latency_aware
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.sim import robotics_fleet
from gpuplace.usecases.cluster_view import ClusterView
from gpuplace.usecases.decide import Decider
from gpuplace.usecases.feedback import Unschedulable, fit_error_message

from . import statuses_oracle

ZONE = "topology.kubernetes.io/zone"
MIG = "nvidia.com/mig-1g.10gb"
ANY = (Toleration(operator="Exists"),)


@dataclass
class Fleet:
    snapshot: ClusterSnapshot
    load: GpuLoad
    streams: dict[str, Stream] = field(default_factory=dict)


def fleet(n_nodes: int, seed: int, fill: float = 0.7, topology: bool = False, busy: bool = False) -> Fleet:
    """A robotics fleet with zones, cordons, taints, MIG slices, a full node and a taken port, filled at random;
    with `topology`, a third of the nodes in two NUMA halves, a third also in NVLink pairs, a third undescribed;
    with `busy`, every GPU partly taken beforehand (at most 900m free), so no GPU is idle."""
    nodes = robotics_fleet.fleet(n_nodes, gpus_per_node=8, seed=seed)
    if busy:
        rng = np.random.default_rng(seed)
        nodes = [replace(n, gpus=tuple(replace(g, free_share_milli=(free := int(rng.integers(0, 901))),
                                               free_memory_mib=g.memory_mib * free // 1000) for g in n.gpus))
                 for n in nodes]
    if topology:
        nodes = [n if i % 3 == 2 else replace(n, gpus=tuple(
            replace(g, numa_node=2 * g.index // len(n.gpus), nvlink_domain=g.index // 2 if i % 3 else None)
            for g in n.gpus)) for i, n in enumerate(nodes)]
    facts = [NodeFacts(n.name, {ZONE: f"zone-{i % 3}"}, taints=(Taint("dedicated", "x"),) if i % 7 == 3 else (),
                       unschedulable=i % 11 == 5, ready=i % 13 != 6, extended={MIG: i % 4} if i % 2 else {})
             for i, n in enumerate(nodes)]
    snapshot = ClusterSnapshot(nodes, facts)
    snapshot.pods_free[1] = 0
    snapshot.host_ports_used[2].append(HostPort(8080))
    out = Fleet(snapshot, GpuLoad.for_snapshot(snapshot))
    random_fit = RandomFit(PolicyContext(rng=np.random.default_rng(seed)))
    for pod, service_ms in robotics_fleet.pods(40 * n_nodes, seed=seed, prefix="fill"):
        if snapshot.allocated_gpu_milli >= fill * snapshot.total_gpu_milli:
            break
        pod = Pod(pod.name, pod.cpu_milli, pod.memory_mib, pod.gpu, rules=PodRules(tolerations=ANY),
                  frame_rate_hz=pod.frame_rate_hz, deadline_ms=pod.deadline_ms, workload_class=pod.workload_class)
        demand = resolve(pod, snapshot)
        decision = decide(snapshot, demand, random_fit)
        if decision.node is not None:
            bind(snapshot, demand, decision)
            out.streams[pod.name] = Stream(pod.frame_rate_hz or 30.0, pod.workload_class, service_ms,
                                           pod.deadline_ms)
            out.load.charge(pod.name, decision.node, decision.gpu_indices, out.streams[pod.name])
    return out


UNPLACEABLE = [
    Pod("whole8", 4000, 16_384, GpuRequest(8, 1000), rules=PodRules(tolerations=ANY)),
    Pod("two-big", 1000, 4096, GpuRequest(2, memory_mib=140 * 1024)),
    Pod("selector", 1000, 4096, GpuRequest(1, 300), rules=PodRules(node_selector=((ZONE, "zone-x"),))),
    Pod("cpu", 200_000, 4096, GpuRequest(1, memory_mib=4096), rules=PodRules(tolerations=ANY)),
    Pod("cpu-memory", 90_000, 800_000, rules=PodRules(tolerations=ANY)),
    Pod("model", 1000, 1024, GpuRequest(1, 200, allowed_models=("NVIDIA-B200",)), rules=PodRules(tolerations=ANY)),
    Pod("mig-port", 1000, 1024, GpuRequest(8, 1000), rules=PodRules(
        tolerations=ANY, host_ports=(HostPort(8080),), extended=((MIG, 3),))),
]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("pod", UNPLACEABLE, ids=lambda p: p.name)
def test_every_nodes_status_is_what_the_per_node_filters_said(pod: Pod, seed: int) -> None:
    f = fleet(60, seed)
    for policy in (BestFit(PolicyContext()), Exclusive(PolicyContext())):
        decision = place(f.snapshot, pod, policy)
        assert not decision.scheduled, (pod.name, decision)
        expected = statuses_oracle.statuses(f.snapshot, resolve(pod, f.snapshot), policy)
        assert dict(decision.statuses) == expected
        assert list(decision.statuses) == list(f.snapshot.node_names)  # in node order


@pytest.mark.parametrize("deadline_ms", [4.0, 12.0, 25.0])
def test_latency_statuses_are_what_the_per_node_filters_said(deadline_ms: float) -> None:
    f = fleet(40, 3, fill=0.85)
    pods = [Pod(f"det-{k}", 1000, 1024, GpuRequest(k, memory_mib=2048), deadline_ms=deadline_ms, frame_rate_hz=30.0,
                workload_class="segmentation") for k in (1, 2)]
    for pod in pods:
        streams = {**f.streams, pod.name: Stream.of(pod)}
        policy = latency_aware(BestFit(PolicyContext()), DEFAULT_MODEL, f.load, streams)
        decision = place(f.snapshot, pod, policy)
        if decision.scheduled:
            continue
        assert dict(decision.statuses) == statuses_oracle.statuses(f.snapshot, resolve(pod, f.snapshot), policy)


def test_each_filter_status_agrees_with_the_oracle_on_every_node_including_those_that_pass() -> None:
    f = fleet(30, 2)
    oracle = dict(statuses_oracle._CHAIN)
    for pod in [*UNPLACEABLE, Pod("small", 500, 1024, GpuRequest(1, memory_mib=2048), rules=PodRules(tolerations=ANY))]:
        demand = resolve(pod, f.snapshot)
        for plugin in FILTERS:
            for node in range(f.snapshot.n_nodes):
                assert plugin.status(f.snapshot, demand, node) == \
                    _named(oracle[plugin.NAME](f.snapshot, demand, node), plugin.NAME), (pod.name, plugin.NAME, node)


TOPOLOGY_PODS = [Pod(f"topo{k}-{share}", 1000, 1024, GpuRequest(k, share, topology="required"),
                     rules=PodRules(tolerations=ANY)) for k in (2, 3, 4, 5) for share in (200, 1000)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gpu_topology_statuses_are_what_the_per_node_filter_said(seed: int) -> None:
    """GpuTopology's verdict (main's filter, made a verdict at the merge) against its per-node status as it was:
    every node of every pod, passing or not, and the whole diagnosis of the pods that fit nowhere."""
    f = fleet(45, seed, fill=0.6, topology=True)
    oracle = dict(statuses_oracle._CHAIN)
    seen: set[tuple[Code, str]] = set()
    for pod in TOPOLOGY_PODS:
        demand = resolve(pod, f.snapshot)
        assert demand.topology_required
        for plugin in FILTERS:
            for node in range(f.snapshot.n_nodes):
                assert plugin.status(f.snapshot, demand, node) == \
                    _named(oracle[plugin.NAME](f.snapshot, demand, node), plugin.NAME), (pod.name, plugin.NAME, node)
        policy = BestFit(PolicyContext())
        decision = place(f.snapshot, pod, policy)
        if not decision.scheduled:
            assert dict(decision.statuses) == statuses_oracle.statuses(f.snapshot, demand, policy)
        for node in range(f.snapshot.n_nodes):
            status = FILTERS[-1].status(f.snapshot, demand, node)
            if not status.ok:
                seen.add((status.code, status.reasons[0].split(" ")[0]))
    # each of the three reasons came up: undescribed, a domain too small, a domain busy
    assert {(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "node"), (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "largest"),
            (Code.UNSCHEDULABLE, "at")} <= seen, seen


def _named(status, plugin: str):
    """The oracle's filters left the plugin to the chain; the verdicts' statuses carry it."""
    return status if status.ok else replace(status, plugin=plugin)


class Counting:
    """A filter module whose verdicts count how often they are computed and explained, and for which rows."""

    def __init__(self, module) -> None:
        self.module, self.NAME = module, module.NAME
        self.verdicts = 0
        self.explained: list[list[int]] = []

    def verdict(self, state: CycleState) -> Verdict:
        self.verdicts += 1
        inner = self.module.verdict(state)

        def explain(rows):
            self.explained.append(rows.tolist())
            return inner.explain(rows)

        return Verdict(inner.plugin, inner.passed, explain)


@pytest.fixture
def counted(monkeypatch) -> list[Counting]:
    """The standard chain, counting; call `reset(counted)` after building a fleet (its prefill decides too)."""
    filters = [Counting(module) for module in FILTERS]
    monkeypatch.setattr(default_steps, "FILTERS", tuple(filters))
    return filters


def reset(counted: list[Counting]) -> None:
    for c in counted:
        c.verdicts, c.explained = 0, []


def test_a_decision_runs_each_filter_once_and_explains_only_when_read(counted: list[Counting]) -> None:
    f = fleet(60, 0)
    reset(counted)
    pod = UNPLACEABLE[3]  # 200 cores: NodeRules refuses the cordoned and tainted nodes, ResourcesFit the others
    decision = place(f.snapshot, pod, BestFit(PolicyContext()))
    assert [c.verdicts for c in counted] == [1, 1, 1, 1, 1]  # once per decision, not once per node
    assert all(c.explained == [] for c in counted)  # nothing formatted yet
    statuses = dict(decision.statuses)
    assert decision.diagnosis is not None
    assert decision.resolvable == any(s.code == Code.UNSCHEDULABLE for s in statuses.values())  # the full node
    rules, resources, model, gpus, topology = counted
    refused_by_rules = [row for row, name in enumerate(f.snapshot.node_names) if statuses[name].plugin == "NodeRules"]
    assert rules.explained == [refused_by_rules] and refused_by_rules  # the rows it refused, nothing else
    assert resources.explained == [sorted(set(range(60)) - set(refused_by_rules))]
    assert model.explained == gpus.explained == topology.explained == []  # every node failed before: never asked
    dict(decision.statuses), decision.diagnosis.counted(), decision.resolvable  # read again: nothing recomputed
    assert [len(c.explained) for c in counted] == [1, 1, 0, 0, 0] and [c.verdicts for c in counted] == [1, 1, 1, 1, 1]


def test_the_decider_explains_a_waiting_pod_from_one_set_of_verdicts(counted: list[Counting]) -> None:
    f = fleet(60, 1)
    reset(counted)
    view = ClusterView("east", f.snapshot)
    outcome = Decider("bestfit")(view, UNPLACEABLE[0], None)
    assert outcome.message.startswith("0/60 nodes are available: ")
    assert [c.verdicts for c in counted] == [1, 1, 1, 1, 1]
    assert [len(c.explained) for c in counted] == [1, 0, 0, 1, 0]  # cordoned/tainted nodes, then GPUs on the others


def test_a_fitting_pod_is_never_explained(counted: list[Counting]) -> None:
    f = fleet(30, 0)
    reset(counted)
    decision = place(f.snapshot, Pod("small", 500, 1024, GpuRequest(1, memory_mib=1024)), BestFit(PolicyContext()))
    assert decision.scheduled and decision.statuses == {} and decision.diagnosis is None
    assert [c.verdicts for c in counted] == [1, 1, 1, 1, 1] and all(c.explained == [] for c in counted)


def test_a_diagnosis_read_after_the_snapshot_changed_is_refused() -> None:
    f = fleet(20, 0)
    decision = place(f.snapshot, UNPLACEABLE[3], BestFit(PolicyContext()))
    small = resolve(Pod("small", 500, 1024, GpuRequest(1, memory_mib=1024)), f.snapshot)
    bind(f.snapshot, small, decide(f.snapshot, small, BestFit(PolicyContext())))
    with pytest.raises(RuntimeError, match="snapshot changed"):
        dict(decision.statuses)


def test_distinct_numbers_rows_by_key_and_keeps_each_keys_first_row() -> None:
    first, which = distinct(np.array([5, 3, 5, 3, 7]), np.array([1.0, 2.0, 1.0, 2.5, 0.0]))
    # keys in order: (3, 2.0), (3, 2.5), (5, 1.0), (7, 0.0); each one's first row
    assert which.tolist() == [2, 0, 2, 1, 3] and first.tolist() == [1, 3, 0, 4]


GPU_FIT_NOW = re.compile(r"(\d+) of (\d+) GPU\(s\) with >= (\d+)m and >= (\d+) MiB free "
                         r"\(largest hole (\d+)m, (\d+) MiB\)")


def _per_class_as_specified(snapshot: ClusterSnapshot, statuses: dict[str, Status]) -> dict[str, str]:
    """The per-node-class reasons from every node's own status (the oracle's), one node at a time: GpuFit's "too
    full now" nodes of a class and a request count together, said with the most GPUs with room and the largest
    hole among them (or as one node says it where they all have the same numbers); every other reason as it reads."""
    by_class: dict[str, dict[object, list]] = {}  # class -> key -> [nodes, first row, numbers...]
    for row, name in enumerate(snapshot.node_names):
        status = statuses[name]
        product = snapshot.gpu_types[snapshot.gpu_type_id[row]].model or "cpu-only"
        match = GPU_FIT_NOW.fullmatch(status.reasons[0]) if status.plugin == "GpuFit" else None
        key: object = (match.group(2), match.group(3), match.group(4)) if match else \
            f"{'; '.join(status.reasons)} ({status.plugin})"
        entry = by_class.setdefault(product, {}).setdefault(key, [0, row, []])
        entry[0] += 1
        if match:
            entry[2].append(tuple(int(match.group(i)) for i in (1, 5, 6)))
    out = {}
    for product, entries in sorted(by_class.items()):
        texts = []
        for key, (n, _first, numbers) in sorted(entries.items(), key=lambda kv: (-kv[1][0], kv[1][1])):
            if isinstance(key, tuple):
                count, share, memory = key
                most, hole_share, hole_memory = (max(column) for column in zip(*numbers, strict=True))
                room = f"with >= {share}m and >= {memory} MiB free"
                if len(set(numbers)) == 1:
                    text = f"{most} of {count} GPU(s) {room} (largest hole {hole_share}m, {hole_memory} MiB)"
                elif count == "1":
                    text = f"no GPU {room} (largest hole {hole_share}m, {hole_memory} MiB)"
                else:
                    text = (f"fewer than {count} GPU(s) {room} (at most {most} such GPU(s) on a node, largest hole "
                            f"{hole_share}m, {hole_memory} MiB)")
                key = f"{text} (GpuFit)"
            texts.append(f"{n} node(s): {key}")
        out[product] = ", ".join(texts[:3])
    return out


def _kube_reason(status: Status) -> Status:
    """kube's message counts GpuFit's "too full now" reason without the node's numbers."""
    match = GPU_FIT_NOW.fullmatch(status.reasons[0]) if status.plugin == "GpuFit" else None
    if match is None:
        return status
    count, share, memory = match.group(2), match.group(3), match.group(4)
    room = f"with >= {share}m and >= {memory} MiB free"
    return replace(status, reasons=(f"no GPU {room}" if count == "1" else f"fewer than {count} GPU(s) {room}",))


WAITING = [UNPLACEABLE[0], Pod("whole3", 1000, 4096, GpuRequest(3, 1000)),
           Pod("one-whole", 1000, 4096, GpuRequest(1, 950), rules=PodRules(tolerations=ANY)),
           Pod("four-large", 1000, 4096, GpuRequest(4, 860, memory_mib=8192), rules=PodRules(tolerations=ANY))]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("pod", WAITING, ids=lambda p: p.name)
def test_the_waiting_pods_reasons_are_counted_from_every_nodes_own_status(pod: Pod, seed: int) -> None:
    """The Decider's per-class reasons and kube's message against the same built from every node's status one node
    at a time (the oracle's): GpuFit's numbers leave kube's message and are said per class as the most and the
    largest, and nothing else changes."""
    f = fleet(90, seed, fill=0.3, busy=True)
    outcome = Decider("bestfit")(ClusterView("east", f.snapshot), pod, None)
    assert isinstance(outcome, Unschedulable), outcome
    statuses = statuses_oracle.statuses(f.snapshot, resolve(pod, f.snapshot), BestFit(PolicyContext()))
    assert dict(outcome) == _per_class_as_specified(f.snapshot, statuses)
    assert outcome.message == fit_error_message(f.snapshot.n_nodes, {n: _kube_reason(s) for n, s in statuses.items()})


def test_a_busy_fleet_formats_one_gpu_fit_reason_per_gpu_model_not_one_per_node() -> None:
    """Issue 16's worst case, small: every node has its own largest hole, yet the diagnosis holds one GpuFit status
    per GPU model's request, kube's message has one GpuFit entry per model, and each node still says its numbers."""
    f = fleet(300, 4, fill=0.8)
    pod = UNPLACEABLE[0]  # 8 whole GPUs
    decision = place(f.snapshot, pod, BestFit(PolicyContext()))
    assert decision.diagnosis is not None
    per_node = {s.reasons[0] for s in decision.statuses.values() if s.plugin == "GpuFit"}
    assert len(per_node) > 60  # the nodes' own reasons are many ...
    gpu_fit_statuses = [s for s in decision.diagnosis.distinct if s.plugin == "GpuFit"]
    assert len(gpu_fit_statuses) <= 2 * len(f.snapshot.gpu_types)  # ... the statuses built are a few per GPU model
    outcome = Decider("bestfit")(ClusterView("east", f.snapshot), pod, None)
    assert isinstance(outcome, Unschedulable)
    assert outcome.message.count("GPU(s) with >=") <= len(f.snapshot.gpu_types)
    assert "largest hole" not in outcome.message and "largest hole" in " ".join(outcome.values())


def test_the_latency_check_is_made_once_per_attempt_and_explaining_reuses_it(monkeypatch) -> None:
    """The latency model's check of every GPU (latency_fit.pre_filter) is what a latency pod's decision costs; the
    Decider makes it once per attempt, and the verdicts, the scores and the reasons of a pod that fits nowhere all
    read that one check."""
    f = fleet(40, 3, fill=0.85)
    calls = []
    pre_filter = latency_fit.pre_filter
    monkeypatch.setattr(latency_fit, "pre_filter", lambda *a, **k: calls.append(1) or pre_filter(*a, **k))
    view = ClusterView("east", f.snapshot, gpu_load=f.load)
    pod = Pod("det", 1000, 1024, GpuRequest(1, memory_mib=2048), deadline_ms=4.0, frame_rate_hz=30.0,
              workload_class="segmentation")
    outcome = Decider("bestfit")(view, pod, Stream.of(pod))
    assert isinstance(outcome, Unschedulable) and "(LatencyFit)" in " ".join(outcome.values())
    assert len(calls) == 1
    Decider("bestfit")(view, pod, Stream.of(pod))
    assert len(calls) == 2  # a new attempt checks again: the co-runners may have changed
