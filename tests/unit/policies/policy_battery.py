"""The common battery every placement policy passes (house rule 9), as a base class to subclass per policy.

A subclass says only how to build its policy (`make_policy(context)`); the battery checks, on hand-made and on
hypothesis-drawn clusters: one score per candidate node; a node the standard filters reject is never chosen
and no GPU, CPU or memory is ever over-committed; the same seed gives the same decisions; identical nodes tie
and the tie goes to the first node in the cluster's order.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplace.core.demand import resolve
from gpuplace.core.filters import FILTERS
from gpuplace.core.framework.interface import PolicyContext
from gpuplace.core.framework.runtime import bind, decide
from gpuplace.core.model import MILLI_PER_GPU, Gpu, GpuRequest, Node, Pod
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.core.workload import typical_workload

from ..core.builders import make_node, make_pod

MODELS = {"V100M16": 16384, "T4": 15360, "A100": 40960}


@st.composite
def clusters(draw):
    out = []
    for i in range(draw(st.integers(1, 6))):
        model = draw(st.sampled_from(sorted(MODELS)))
        memory = MODELS[model]
        gpus = tuple(
            Gpu(g, model, memory, free, free * memory // MILLI_PER_GPU)
            for g, free in enumerate(draw(st.lists(st.integers(0, 1000), max_size=8)))
        )
        cpu = draw(st.integers(1, 96)) * 1000
        memory_mib = draw(st.integers(1, 64)) * 4096
        out.append(Node(f"n{i}", cpu, memory_mib, gpus, draw(st.integers(0, cpu)), draw(st.integers(0, memory_mib))))
    return out


REQUESTS = st.one_of(
    st.just(GpuRequest()),
    st.builds(GpuRequest, st.just(1), st.integers(1, 1000)),
    st.builds(GpuRequest, st.integers(1, 8), st.just(1000)),
    st.builds(GpuRequest, st.integers(1, 2), st.none(), st.integers(1, 40960)),
    st.builds(GpuRequest, st.just(1), st.integers(1, 999), st.none(),
              st.lists(st.sampled_from(sorted(MODELS)), max_size=2).map(tuple)),
)


@st.composite
def pod_lists(draw):
    return [Pod(f"p{i}", draw(st.integers(0, 32)) * 500, draw(st.integers(0, 32)) * 512, draw(REQUESTS))
            for i in range(draw(st.integers(1, 30)))]


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class PolicyBattery:
    """Subclass and define make_policy(context) -> Policy."""

    def make_policy(self, context: PolicyContext):
        raise NotImplementedError

    def _policy(self, snapshot: ClusterSnapshot, pods: list[Pod], seed: int = 0):
        return self.make_policy(PolicyContext(typical_workload(pods, snapshot.gpu_types), np.random.default_rng(seed)))

    def _place_all(self, nodes: list[Node], pods: list[Pod], seed: int):
        snapshot = ClusterSnapshot(nodes)
        policy = self._policy(snapshot, pods, seed)
        decisions = []
        for pod in pods:
            demand = resolve(pod, snapshot)
            feasible = np.flatnonzero(policy.filter(snapshot, demand))
            if len(feasible):
                scores = np.asarray(policy.score(snapshot, demand, feasible))
                assert scores.shape == feasible.shape  # one score per candidate
            decision = decide(snapshot, demand, policy)
            if decision.scheduled:
                assert all(f.status(snapshot, demand, decision.node).ok for f in FILTERS)  # never infeasible
                bind(snapshot, demand, decision)  # raises if a GPU, CPU or memory would be over-committed
            else:
                assert not any(all(f.status(snapshot, demand, n).ok for f in FILTERS) for n in range(snapshot.n_nodes))
            decisions.append((decision.node_name, decision.gpu_indices))
        return snapshot, decisions

    @SETTINGS
    @given(clusters(), pod_lists(), st.integers(0, 2**16))
    def test_feasible_only_and_never_over_committed(self, nodes, pods, seed):
        snapshot, _ = self._place_all(nodes, pods, seed)
        exists = snapshot.gpu_exists
        assert ((snapshot.free_share_milli >= 0) & (snapshot.free_share_milli <= MILLI_PER_GPU))[exists].all()
        assert (snapshot.free_memory_mib >= 0).all() and (snapshot.cpu_free_milli >= 0).all()
        assert (snapshot.memory_free_mib >= 0).all()

    @SETTINGS
    @given(clusters(), pod_lists(), st.integers(0, 2**16))
    def test_same_seed_same_decisions(self, nodes, pods, seed):
        assert self._place_all(nodes, pods, seed)[1] == self._place_all(nodes, pods, seed)[1]

    def test_one_score_per_candidate_whatever_the_subset(self):
        snapshot = ClusterSnapshot([make_node(f"n{i}").cpu(32).gpus(4).free(1000 - 100 * i).build() for i in range(5)])
        pod = make_pod("p").cpu(2).gpu_share(300).build()
        policy = self._policy(snapshot, [pod])
        demand = resolve(pod, snapshot)
        for candidates in (np.arange(5), np.array([4, 1]), np.array([2])):
            assert np.asarray(policy.score(snapshot, demand, candidates)).shape == candidates.shape

    def test_identical_nodes_tie_and_the_first_node_wins(self):
        nodes = [make_node(name).cpu(32).gpus(2).free(600, 1000).build() for name in ("b", "a", "c")]
        pods = [make_pod("p").cpu(2).gpu_share(400).build(), make_pod("w").cpu(4).whole_gpus(1).build(),
                make_pod("c").cpu(4).build()]
        for pod in pods:
            snapshot = ClusterSnapshot(nodes)
            policy = self._policy(snapshot, pods)
            demand = resolve(pod, snapshot)
            scores = np.asarray(policy.score(snapshot, demand, np.arange(3)))
            assert scores[0] == scores[1] == scores[2]
            assert decide(snapshot, demand, policy).node_name == "b"  # first in the cluster's order, not by name

    def test_a_node_no_filter_passes_is_never_chosen(self):
        # n0: too little CPU; n1: wrong GPU model; n2: no GPU with 700m free; n3 fits
        snapshot = ClusterSnapshot([
            make_node("n0").cpu(64, free=1).gpus(2).build(),
            make_node("n1").cpu(64).gpus(2, "T4", 15360).build(),
            make_node("n2").cpu(64).gpus(2).free(600, 500).build(),
            make_node("n3").cpu(64).gpus(2).free(1000, 0).build(),
        ])
        pod = make_pod("p").cpu(8).gpu_share(700, models=("V100M16",)).build()
        decision = decide(snapshot, resolve(pod, snapshot), self._policy(snapshot, [pod]))
        assert (decision.node_name, decision.gpu_indices) == ("n3", (0,))
