"""The battery every registered placement policy passes (house rule 9), one check per name in the registry.

In the spirit of scikit-learn's `parametrize_with_checks`: each check runs once for every name
`framework.registry.names()` holds, so a policy registered tomorrow is checked by the same tests without a
line added here. The checks are what framework/interface.py and runtime.py say a policy promises:
- `filter` is a bool mask over the nodes that narrows the standard chain (node rules, CPU and memory, GPU
  model, GPUs with room) and never widens it, and agrees with `explain` node by node;
- `score` gives one finite number per candidate, whatever the subset, and leaves the candidates alone;
- `choose_gpus` gives `gpu_count` distinct GPUs of the chosen node, each with the share and memory the pod
  needs free, by what is reserved and by what telemetry sees in use;
- so a decision is a feasible node and GPUs, or a clear "none" with a reason for every node; binding it never
  over-commits a GPU, the CPU, the memory, the pod slots or the countables of a node;
- deciding never changes the snapshot or the demand; the same cluster, pods and seed give the same decisions;
- identical nodes tie and the tie goes to the first node in the cluster's order (except for a policy that
  draws at random, DRAWS_AT_RANDOM).
The checks run on hand-made clusters and on hypothesis-drawn ones, with and without node facts (labels,
taints, cordon, readiness, pod slots, host ports, countables) and with GPU memory telemetry.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplace.core.demand import resolve
from gpuplace.core.filters import FILTERS
from gpuplace.core.framework.interface import Code, PolicyContext
from gpuplace.core.framework.runtime import Decision, bind, decide
from gpuplace.core.gpu_usable import usable_gpus
from gpuplace.core.model import MILLI_PER_GPU, Gpu, GpuRequest, Node, Pod
from gpuplace.core.node_rules import HostPort, NodeFacts, PodRules, Requirement, SelectorTerm, Taint, Toleration
from gpuplace.core.policies import registry
from gpuplace.core.snapshot import UNLIMITED_PODS, ClusterSnapshot
from gpuplace.core.workload import typical_workload
from gpuplace.sim import simulator

from ..core.builders import make_node, make_pod

each_policy = pytest.mark.parametrize("name", registry.names())

DRAWS_AT_RANDOM = {"random"}
"""Policies whose choice among equal nodes is a seeded draw, not the first node (exempt from the tie check)."""

MODELS = {"V100M16": 16384, "T4": 15360, "A100": 40960}
MIG = "nvidia.com/mig-1g.10gb"


def make_policy(name: str, snapshot: ClusterSnapshot, pods: list[Pod], seed: int = 0):
    """The registered policy, given what the registry hands every policy: the typical workload and a seeded RNG."""
    workload = typical_workload(pods, snapshot.gpu_types)
    return registry.create(name, PolicyContext(workload, np.random.default_rng(seed)))


# -- drawn clusters and pods --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cluster:
    """What a snapshot is built from: nodes, optional facts, and what only a live cluster has (pod slots, GPU
    memory telemetry shows in use). `snapshot()` builds a fresh one each time."""

    nodes: tuple[Node, ...]
    facts: tuple[NodeFacts, ...] | None
    pods_free: tuple[int, ...]
    observed_mib: tuple[tuple[int, ...], ...]

    def snapshot(self) -> ClusterSnapshot:
        snapshot = ClusterSnapshot(self.nodes, self.facts)
        snapshot.pods_free[:] = self.pods_free
        for row, used in enumerate(self.observed_mib):
            snapshot.observed_used_memory_mib[row, : len(used)] = used
        return snapshot


@st.composite
def node_facts(draw, name: str) -> NodeFacts:
    return NodeFacts(
        name,
        labels=draw(st.sampled_from([{}, {"zone": "a"}, {"zone": "b"}])),
        taints=draw(st.sampled_from([(), (Taint("dedicated", "robots", "NoSchedule"),)])),
        unschedulable=draw(st.booleans()),
        ready=draw(st.booleans()),
        extended=draw(st.sampled_from([{}, {MIG: 0}, {MIG: 1}, {MIG: 3}])),
    )


@st.composite
def clusters(draw) -> Cluster:
    nodes, observed = [], []
    for i in range(draw(st.integers(1, 6))):
        model = draw(st.sampled_from(sorted(MODELS)))
        memory = MODELS[model]
        gpus = tuple(
            Gpu(g, model, memory, free, free * memory // MILLI_PER_GPU)
            for g, free in enumerate(draw(st.lists(st.integers(0, 1000), max_size=8)))
        )
        observed.append(tuple(draw(st.sampled_from([0, 0, memory // 2, memory])) for _ in gpus))
        cpu = draw(st.integers(1, 96)) * 1000
        memory_mib = draw(st.integers(1, 64)) * 4096
        nodes.append(Node(f"n{i}", cpu, memory_mib, gpus, draw(st.integers(0, cpu)), draw(st.integers(0, memory_mib))))
    if not draw(st.booleans()):  # a bare cluster, as the trace harness builds: no rules, slots unlimited
        return Cluster(tuple(nodes), None, (UNLIMITED_PODS,) * len(nodes), tuple(observed))
    facts = tuple(draw(node_facts(n.name)) for n in nodes)
    slots = tuple(draw(st.sampled_from([UNLIMITED_PODS, 0, 1, 3])) for _ in nodes)
    return Cluster(tuple(nodes), facts, slots, tuple(observed))


REQUESTS = st.one_of(
    st.just(GpuRequest()),
    st.builds(GpuRequest, st.just(1), st.integers(1, 1000)),
    st.builds(GpuRequest, st.integers(1, 8), st.just(1000)),
    st.builds(GpuRequest, st.integers(1, 2), st.none(), st.integers(1, 40960)),
    st.builds(GpuRequest, st.just(1), st.integers(1, 999), st.none(),
              st.lists(st.sampled_from(sorted(MODELS)), max_size=2).map(tuple)),
)

ZONE_B = SelectorTerm((Requirement("zone", "In", ("b",)),))
RULES = st.builds(
    PodRules,
    node_selector=st.sampled_from([(), (("zone", "a"),)]),
    required_terms=st.sampled_from([(), (ZONE_B,)]),
    preferred_terms=st.sampled_from([(), ((10, ZONE_B),)]),
    tolerations=st.sampled_from([(), (Toleration("dedicated", "Equal", "robots", "NoSchedule"),),
                                 (Toleration(operator="Exists"),)]),
    host_ports=st.sampled_from([(), (HostPort(8080),)]),
    extended=st.sampled_from([(), ((MIG, 1),)]),
)


@st.composite
def pod_lists(draw) -> list[Pod]:
    return [Pod(f"p{i}", draw(st.integers(0, 32)) * 500, draw(st.integers(0, 32)) * 512, draw(REQUESTS),
                rules=draw(RULES)) for i in range(draw(st.integers(1, 30)))]


SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- what every decision must satisfy -----------------------------------------------------------------------


def _state(snapshot: ClusterSnapshot, *, caches: bool = True) -> dict[str, object]:
    """Everything deciding must leave as it is: every array, the host ports, the countables (and the cached
    masks, with `caches`)."""
    state: dict[str, object] = {k: v.copy() for k, v in vars(snapshot).items() if isinstance(v, np.ndarray)}
    state["host_ports_used"] = [list(p) for p in snapshot.host_ports_used]
    state["extended_free"] = {k: v.copy() for k, v in snapshot.extended_free.items()}
    state["facts"] = snapshot.facts
    if caches:
        state["rule_arrays"] = {k: None if v is None else v.copy() for k, v in snapshot._rule_arrays.items()}
        state["static_masks"] = {k: v.allowed.copy() for k, v in snapshot._static_reasons.items()}
    return state


def _assert_same(before: dict[str, object], after: dict[str, object]) -> None:
    assert before.keys() == after.keys()
    for key, value in before.items():
        if isinstance(value, np.ndarray):
            assert np.array_equal(value, after[key]), key
        elif isinstance(value, dict):
            assert value.keys() <= after[key].keys(), key  # caches may grow, never change
            for k, v in value.items():
                assert (v is None and after[key][k] is None) or np.array_equal(v, after[key][k]), (key, k)
        else:
            assert value == after[key], key


def _chain_passes(snapshot: ClusterSnapshot, demand, node: int) -> bool:
    return all(f.status(snapshot, demand, node).ok for f in FILTERS)


def _checked_decision(policy, snapshot: ClusterSnapshot, pod: Pod) -> tuple[Decision, object]:
    """decide() for `pod`, with every promise of filter, score, choose_gpus and explain checked on the way."""
    demand = resolve(pod, snapshot)
    demand_arrays = [a.copy() for a in (demand.share_milli_by_type, demand.gpu_memory_mib_by_type,
                                        demand.allowed_by_type)]
    before = _state(snapshot)

    mask = np.asarray(policy.filter(snapshot, demand))
    assert mask.dtype == bool and mask.shape == (snapshot.n_nodes,)
    for node in np.flatnonzero(mask):  # a policy narrows the standard chain, never widens it
        assert _chain_passes(snapshot, demand, int(node)), snapshot.node_names[node]
    explain = getattr(policy, "explain", None)
    if explain is not None:  # explain says why exactly the nodes the filter refuses are refused
        for node in range(snapshot.n_nodes):
            status = explain(snapshot, demand, node)
            assert status.ok == bool(mask[node]), (snapshot.node_names[node], status)
            assert status.ok or status.reasons
    candidates = np.flatnonzero(mask)
    if len(candidates):
        given_candidates = candidates.copy()
        scores = np.asarray(policy.score(snapshot, demand, given_candidates))
        assert scores.shape == candidates.shape and np.isfinite(scores).all()  # a number for every candidate
        assert np.array_equal(given_candidates, candidates)

    decision = decide(snapshot, demand, policy, explain=True)
    _assert_same(before, _state(snapshot))  # deciding never changes the cluster ...
    for kept, now in zip(demand_arrays, (demand.share_milli_by_type, demand.gpu_memory_mib_by_type,
                                         demand.allowed_by_type), strict=True):
        assert np.array_equal(kept, now)  # ... nor the demand

    if decision.scheduled:
        node = decision.node
        assert policy.filter(snapshot, demand)[node] and _chain_passes(snapshot, demand, node)
        assert decision.node_name == snapshot.node_names[node]
        gpus = decision.gpu_indices
        assert len(gpus) == demand.gpu_count and len(set(gpus)) == len(gpus)
        usable = usable_gpus(snapshot, demand, slice(node, node + 1))[0]
        assert all(usable[g] for g in gpus), (gpus, usable)  # room by reservation and by telemetry
    else:  # a clear "none": no node, no GPUs, and a reason for every node
        assert decision.node_name is None and decision.gpu_indices == () and decision.score is None
        assert not policy.filter(snapshot, demand).any()
        assert set(decision.statuses) == set(snapshot.node_names)
        assert all(not s.ok and s.reasons for s in decision.statuses.values())
    return decision, demand


def _bind_in_turn(policy, snapshot: ClusterSnapshot, pods: list[Pod]) -> list[tuple[Decision, object]]:
    """Decide and bind each pod in turn, checking every decision; (decision, demand) per pod."""
    out = []
    for pod in pods:
        decision, demand = _checked_decision(policy, snapshot, pod)
        if decision.scheduled:
            bind(snapshot, demand, decision)  # raises if a GPU, the CPU or the memory would be over-committed
        out.append((decision, demand))
    return out


def _place_all(name: str, cluster: Cluster, pods: list[Pod], seed: int):
    """`_bind_in_turn` on a fresh snapshot of `cluster`; returns the snapshot and (node, GPUs, score) per pod."""
    snapshot = cluster.snapshot()
    placed = _bind_in_turn(make_policy(name, snapshot, pods, seed), snapshot, pods)
    return snapshot, [(d.node_name, d.gpu_indices, d.score) for d, _ in placed]


# -- drawn clusters --------------------------------------------------------------------------------------------


@each_policy
@SETTINGS
@given(cluster=clusters(), pods=pod_lists(), seed=st.integers(0, 2**16))
def test_only_feasible_placements_and_nothing_over_committed(name, cluster, pods, seed):
    snapshot, _ = _place_all(name, cluster, pods, seed)
    exists = snapshot.gpu_exists
    assert ((snapshot.free_share_milli >= 0) & (snapshot.free_share_milli <= MILLI_PER_GPU))[exists].all()
    assert ((snapshot.free_memory_mib >= 0) & (snapshot.free_memory_mib <= snapshot.gpu_memory_mib[:, None])).all()
    assert ((snapshot.cpu_free_milli >= 0) & (snapshot.cpu_free_milli <= snapshot.cpu_capacity_milli)).all()
    assert ((snapshot.memory_free_mib >= 0) & (snapshot.memory_free_mib <= snapshot.memory_capacity_mib)).all()
    assert (snapshot.pods_free >= 0).all()
    assert all((free >= 0).all() for free in snapshot.extended_free.values())
    if cluster.facts is not None:  # a bare cluster (the trace harness) limits no ports, by design
        for ports in snapshot.host_ports_used:  # no two pods on one node hold the same host port
            assert not any(a.conflicts(b) for i, a in enumerate(ports) for b in ports[i + 1:])


@each_policy
@SETTINGS
@given(cluster=clusters(), pods=pod_lists(), seed=st.integers(0, 2**16))
def test_same_cluster_pods_and_seed_give_the_same_decisions(name, cluster, pods, seed):
    assert _place_all(name, cluster, pods, seed)[1] == _place_all(name, cluster, pods, seed)[1]


@each_policy
@SETTINGS
@given(cluster=clusters(), pods=pod_lists(), seed=st.integers(0, 2**16))
def test_a_pod_left_unplaced_leaves_no_trace(name, cluster, pods, seed):
    snapshot, decisions = _place_all(name, cluster, pods, seed)
    # binding only the placed pods, where they went, reaches the same cluster: the others took nothing
    replay = cluster.snapshot()
    for pod, (node_name, gpus, _) in zip(pods, decisions, strict=True):
        if node_name is not None:
            demand = resolve(pod, replay)
            bind(replay, demand, Decision(pod.name, replay.index_of(node_name), node_name, gpus))
    _assert_same(_state(replay, caches=False), _state(snapshot, caches=False))


@each_policy
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), pods=pod_lists(), seed=st.integers(0, 2**16))
def test_the_simulator_is_a_function_of_its_seed(name, cluster, pods, seed):
    nodes = list(cluster.nodes)
    if not any(n.gpus for n in nodes):
        nodes.append(Node.with_gpus("gpu", 8000, 8192, 1, "T4", 15360))
    one = simulator.run(nodes, pods, name, seed)
    two = simulator.run(nodes, pods, name, seed)
    assert np.array_equal(one.allocated_milli, two.allocated_milli)
    assert np.array_equal(one.arrived_milli, two.arrived_milli)
    assert one.failed_by_shape == two.failed_by_shape


# -- hand-made clusters -----------------------------------------------------------------------------------------


@each_policy
def test_the_registry_builds_it_under_its_name(name):
    snapshot = ClusterSnapshot([make_node("n").gpus(1).build()])
    assert make_policy(name, snapshot, [make_pod("p").gpu_share(500).build()]).name == name


@each_policy
def test_one_score_per_candidate_whatever_the_subset(name):
    snapshot = ClusterSnapshot([make_node(f"n{i}").cpu(32).gpus(4).free(1000 - 100 * i).build() for i in range(5)])
    pod = make_pod("p").cpu(2).gpu_share(300).build()
    policy = make_policy(name, snapshot, [pod])
    demand = resolve(pod, snapshot)
    for candidates in (np.arange(5), np.array([4, 1]), np.array([2])):
        assert np.asarray(policy.score(snapshot, demand, candidates)).shape == candidates.shape


def _identical_nodes() -> tuple[list[Node], list[Pod]]:
    nodes = [make_node(n).cpu(32).gpus(2).free(600, 1000).build() for n in ("b", "a", "c")]
    pods = [make_pod("p").cpu(2).gpu_share(400).build(), make_pod("w").cpu(4).whole_gpus(1).build(),
            make_pod("c").cpu(4).build()]
    return nodes, pods


@pytest.mark.parametrize("name", [n for n in registry.names() if n not in DRAWS_AT_RANDOM])
def test_identical_nodes_tie_and_the_first_node_wins(name):
    nodes, pods = _identical_nodes()
    for pod in pods:
        snapshot = ClusterSnapshot(nodes)
        policy = make_policy(name, snapshot, pods)
        demand = resolve(pod, snapshot)
        scores = np.asarray(policy.score(snapshot, demand, np.arange(3)))
        assert scores[0] == scores[1] == scores[2], pod.name
        assert decide(snapshot, demand, policy).node_name == "b", pod.name  # first in the cluster's order


@pytest.mark.parametrize("name", sorted(DRAWS_AT_RANDOM & set(registry.names())))
def test_a_policy_that_draws_picks_among_identical_nodes_by_its_seed(name):
    nodes, pods = _identical_nodes()

    def chosen(seed: int) -> list[str | None]:
        snapshot = ClusterSnapshot(nodes)
        policy = make_policy(name, snapshot, pods, seed)
        return [decide(snapshot, resolve(pods[0], snapshot), policy).node_name for _ in range(12)]

    assert chosen(3) == chosen(3)
    assert len(set(chosen(3))) > 1 and set(chosen(3)) <= {"a", "b", "c"}


@each_policy
def test_a_node_the_standard_filters_refuse_is_never_chosen(name):
    # n0: too little CPU; n1: wrong GPU model; n2: no GPU with 700m free; n3 fits, on GPU 0 only
    snapshot = ClusterSnapshot([
        make_node("n0").cpu(64, free=1).gpus(2).build(),
        make_node("n1").cpu(64).gpus(2, "T4", 15360).build(),
        make_node("n2").cpu(64).gpus(2).free(600, 500).build(),
        make_node("n3").cpu(64).gpus(2).free(1000, 0).build(),
    ])
    pod = make_pod("p").cpu(8).gpu_share(700, models=("V100M16",)).build()
    decision = decide(snapshot, resolve(pod, snapshot), make_policy(name, snapshot, [pod]))
    assert (decision.node_name, decision.gpu_indices) == ("n3", (0,))


def _ruled_cluster() -> ClusterSnapshot:
    """Six equal idle nodes, five of them closed to a plain pod that wants host port 80 and one MIG slice."""
    facts = [
        NodeFacts("cordoned", unschedulable=True, extended={MIG: 1}),
        NodeFacts("tainted", taints=(Taint("dedicated", "infra", "NoSchedule"),), extended={MIG: 1}),
        NodeFacts("not-ready", ready=False, extended={MIG: 1}),
        NodeFacts("port-taken", extended={MIG: 1}),
        NodeFacts("no-slice", extended={MIG: 0}),
        NodeFacts("open", extended={MIG: 1}),
    ]
    snapshot = ClusterSnapshot([make_node(f.name).cpu(32).gpus(2).build() for f in facts], facts)
    snapshot.take_slots(3, PodRules(host_ports=(HostPort(80),)), 1)
    return snapshot


@each_policy
def test_node_rules_keep_pods_off_forbidden_nodes(name):
    snapshot = _ruled_cluster()
    rules = PodRules(host_ports=(HostPort(80),), extended=((MIG, 1),))
    pods = [Pod("gpu", 2000, 1024, GpuRequest(1, 500), rules=rules), Pod("cpu", 2000, 1024, rules=rules)]
    for pod in pods:
        decision = decide(snapshot, resolve(pod, snapshot), make_policy(name, snapshot, pods))
        assert decision.node_name == "open", pod.name
    # a selector only the tainted node matches, without the toleration: nowhere, and no move would help
    snapshot = _ruled_cluster()
    selective = Pod("s", 2000, 1024, GpuRequest(1, 500), rules=PodRules(required_terms=(
        SelectorTerm(match_fields=(Requirement("metadata.name", "In", ("tainted",)),)),)))
    decision, _ = _checked_decision(make_policy(name, snapshot, [selective]), snapshot, selective)
    assert not decision.scheduled and not decision.resolvable
    # with the toleration it goes there
    tolerant = Pod("t", 2000, 1024, GpuRequest(1, 500), rules=PodRules(
        required_terms=selective.rules.required_terms, tolerations=(Toleration("dedicated", "Exists"),)))
    assert decide(snapshot, resolve(tolerant, snapshot), make_policy(name, snapshot, [tolerant])).node_name == "tainted"


@each_policy
def test_full_pod_slots_refuse_a_pod_until_one_is_given_back(name):
    facts = [NodeFacts("n0"), NodeFacts("n1")]
    snapshot = ClusterSnapshot([make_node(f.name).cpu(32).gpus(2).build() for f in facts], facts)
    snapshot.pods_free[:] = 1
    pods = [make_pod(f"p{i}").cpu(1).gpu_share(100).build() for i in range(3)]
    policy = make_policy(name, snapshot, pods)
    (first, demand), (second, _), (third, _) = _bind_in_turn(policy, snapshot, pods)
    assert {first.node_name, second.node_name} == {"n0", "n1"}  # two slots, two pods
    assert not third.scheduled and (snapshot.pods_free == 0).all()  # the third is refused with a reason
    node, gpu_type = first.node, snapshot.gpu_type_id[first.node]
    snapshot.refund(node, first.gpu_indices, demand.cpu_milli, demand.memory_mib,
                    int(demand.share_milli_by_type[gpu_type]), int(demand.gpu_memory_mib_by_type[gpu_type]),
                    demand.kind_on(snapshot, node), demand.rules)
    decision, _ = _checked_decision(policy, snapshot, pods[2])
    assert decision.node_name == first.node_name  # the slot given back takes it


@each_policy
def test_a_gpu_telemetry_shows_full_is_never_taken(name):
    # GPU 0 has all its share and memory free by reservation, but an unreserved process uses 15 GiB of it
    snapshot = ClusterSnapshot([make_node("n").cpu(32).gpus(2).build()])
    snapshot.observed_used_memory_mib[0, 0] = 15360
    pod = make_pod("p").cpu(2).gpu_memory_mib(4096).build()
    decision, _ = _checked_decision(make_policy(name, snapshot, [pod]), snapshot, pod)
    assert (decision.node_name, decision.gpu_indices) == ("n", (1,))


@each_policy
def test_a_cluster_without_gpus_places_cpu_pods_and_refuses_gpu_pods_for_good(name):
    snapshot = ClusterSnapshot([make_node("a").cpu(8).build(), make_node("b").cpu(8).build()])
    gpu_pod, cpu_pod = make_pod("g").cpu(1).gpu_share(500).build(), make_pod("c").cpu(1).build()
    policy = make_policy(name, snapshot, [gpu_pod, cpu_pod])
    decision, _ = _checked_decision(policy, snapshot, gpu_pod)
    assert not decision.scheduled and not decision.resolvable  # no node will ever have a GPU for it
    assert {s.code for s in decision.statuses.values()} == {Code.UNSCHEDULABLE_AND_UNRESOLVABLE}
    decision, _ = _checked_decision(policy, snapshot, cpu_pod)
    assert decision.node_name in {"a", "b"} and decision.gpu_indices == ()


@each_policy
def test_a_full_cluster_refuses_a_pod_with_reasons_a_move_could_answer(name):
    snapshot = ClusterSnapshot([make_node("a").cpu(32).gpus(2).free(300, 300).build(),
                                make_node("b").cpu(32).gpus(1).free(0).build()])
    pod = make_pod("p").cpu(2).gpu_share(500).build()
    decision, _ = _checked_decision(make_policy(name, snapshot, [pod]), snapshot, pod)
    assert not decision.scheduled and decision.resolvable  # the GPUs are big enough: moving pods would free one
    assert {s.code for s in decision.statuses.values()} == {Code.UNSCHEDULABLE}


@each_policy
def test_a_pod_bigger_than_every_node_is_refused_for_good(name):
    snapshot = ClusterSnapshot([make_node(f"n{i}").cpu(32).gpus(4).build() for i in range(3)])
    for pod in (make_pod("gpus").cpu(2).whole_gpus(8).build(), make_pod("cpu").cpu(64).build(),
                make_pod("mib").cpu(2).gpu_memory_mib(20000).build()):
        decision, _ = _checked_decision(make_policy(name, snapshot, [pod]), snapshot, pod)
        assert not decision.scheduled and not decision.resolvable, pod.name


@each_policy
def test_multi_gpu_pods_take_distinct_gpus_with_room(name):
    snapshot = ClusterSnapshot([make_node("n").cpu(64).gpus(4).free(1000, 200, 1000, 1000).build()])
    pods = [make_pod("w2").cpu(2).whole_gpus(2).build(), make_pod("w1").cpu(2).whole_gpus(1).build(),
            make_pod("w0").cpu(2).whole_gpus(1).build()]
    taken = [g for d, _ in _bind_in_turn(make_policy(name, snapshot, pods), snapshot, pods) for g in d.gpu_indices]
    assert sorted(taken) == [0, 2, 3]  # the three whole GPUs; GPU 1 (200m free) fits none of them
