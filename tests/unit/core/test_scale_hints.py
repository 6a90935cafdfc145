"""core/scale_hints: what blocks each waiting pod, the node shape that would place them, nodes that could drain."""

from __future__ import annotations

import numpy as np
import pytest

from gpuplace.core.defrag.model import Blocker
from gpuplace.core.framework.interface import Policy, PolicyContext
from gpuplace.core.model import Node
from gpuplace.core.node_rules import NodeFacts, PodRules, Taint
from gpuplace.core.policies import registry
from gpuplace.core.scale_hints import NodeShape, hints, shapes_of
from gpuplace.core.snapshot import ClusterSnapshot
from tests.unit.core.builders import make_node, make_pod
from tests.unit.defrag.cluster import Cluster

V100 = ("V100M16", 16_384)
A100 = NodeShape("A100-40GB", 2, 40_960, 64_000, 262_144)
H100 = NodeShape("H100-80GB", 4, 81_920, 64_000, 262_144)


def policy() -> Policy:
    return registry.create("bestfit", PolicyContext())


def half_used(*names: str) -> ClusterSnapshot:
    """Nodes of 2 x V100 16 GiB, each GPU with 8 GiB (500m) free."""
    return ClusterSnapshot([make_node(n).gpus(2, *V100).free(500, 500).build() for n in names])


def verdicts(hint: object) -> list[Blocker]:
    return [v.blocked_by for v in hint.verdicts]  # type: ignore[attr-defined]


def test_room_in_total_but_in_pieces_is_fragmentation_and_a_pod_that_fits_is_placed_first() -> None:
    snapshot = half_used("n1", "n2")  # 32 GiB free in four 8 GiB holes
    waiting = [make_pod("small").gpu_memory_mib(6_000).build(), make_pod("big").gpu_memory_mib(12_288).build()]
    hint = hints(snapshot, waiting, shapes_of(snapshot), policy())
    assert verdicts(hint) == [Blocker.NONE, Blocker.FRAGMENTATION]
    assert "none with room" in hint.verdicts[1].reason
    assert int(snapshot.free_memory_mib.sum()) == 4 * 8_192  # the caller's snapshot is untouched


def test_a_wave_does_not_count_the_same_free_memory_twice() -> None:
    snapshot = half_used("n1", "n2")  # 32 GiB free: two 12 GiB pods in pieces, not a third
    waiting = [make_pod(f"p{i}").gpu_memory_mib(12_288).build() for i in range(3)]
    hint = hints(snapshot, waiting, shapes_of(snapshot), policy())
    assert verdicts(hint) == [Blocker.FRAGMENTATION, Blocker.FRAGMENTATION, Blocker.CAPACITY]
    assert hint.blocked() == {Blocker.FRAGMENTATION: 2, Blocker.CAPACITY: 1}


def test_too_little_free_in_total_is_capacity() -> None:
    snapshot = ClusterSnapshot([make_node("n1").gpus(1, *V100).free(500).build()])  # 8 GiB free
    hint = hints(snapshot, [make_pod("p").gpu_memory_mib(12_288).build()], shapes_of(snapshot), policy())
    assert verdicts(hint) == [Blocker.CAPACITY]
    assert "not enough free GPU" in hint.verdicts[0].reason
    assert [(a.shape.gpu_model, a.nodes, a.pods) for a in hint.additions] == [("V100M16", 1, ("p",))]


def test_no_node_of_a_suitable_model_is_capacity_when_a_declared_shape_hosts_it_else_a_constraint() -> None:
    snapshot = half_used("n1")
    pod = make_pod("train").whole_gpus(2, models=("A100-40GB",)).build()
    with_a100 = hints(snapshot, [pod], shapes_of(snapshot, [A100]), policy())
    assert verdicts(with_a100) == [Blocker.CAPACITY]
    assert "A100-40GB" in with_a100.verdicts[0].reason
    assert [(a.shape, a.nodes) for a in with_a100.additions] == [(A100, 1)]
    without = hints(snapshot, [pod], shapes_of(snapshot), policy())
    assert verdicts(without) == [Blocker.CONSTRAINT]
    assert without.additions == () and without.unplaceable == ("train",)


def test_the_shape_that_places_the_wave_with_fewest_nodes_is_chosen_and_the_reason_names_the_others() -> None:
    snapshot = half_used("n1")  # V100s: a 20 GiB pod never fits them
    ten = [make_pod(f"p{i}").gpu_memory_mib(20_480).build() for i in range(10)]
    hint = hints(snapshot, ten, shapes_of(snapshot, [A100, H100]), policy())
    assert [(a.shape, a.nodes) for a in hint.additions] == [(H100, 1)]  # 4 x 80 GiB hold 12; A100s need 3
    assert hint.nodes_needed == 1
    assert hint.trials == {H100.name: 1, A100.name: 3}
    assert f"{A100.name} would need 3" in hint.reason and "V100M16" in hint.reason  # V100s cannot host any
    four = ten[:4]
    tie = hints(snapshot, four, shapes_of(snapshot, [A100, H100]), policy())
    assert [(a.shape, a.nodes) for a in tie.additions] == [(A100, 1)]  # one node either way: the smaller one


def test_pods_that_need_different_models_get_one_addition_each() -> None:
    snapshot = half_used("n1")
    waiting = [make_pod("a").whole_gpus(2, models=("A100-40GB",)).build(),
               make_pod("h").whole_gpus(4, models=("H100-80GB",)).build()]
    hint = hints(snapshot, waiting, shapes_of(snapshot, [A100, H100]), policy())
    assert sorted((a.shape.gpu_model, a.nodes, a.pods) for a in hint.additions) == [
        ("A100-40GB", 1, ("a",)), ("H100-80GB", 1, ("h",))]
    assert hint.unplaceable == ()


def test_new_nodes_carry_their_groups_labels_and_taints() -> None:
    nodes = [make_node("gpu-a").gpus(2, *V100).free(0, 0).build()]
    facts = [NodeFacts("gpu-a", {"pool": "perception", "kubernetes.io/hostname": "gpu-a"},
                       (Taint("gpu", "true"),), unschedulable=False)]
    snapshot = ClusterSnapshot(nodes, facts)
    shape = shapes_of(snapshot)[0]
    assert dict(shape.labels)["pool"] == "perception" and shape.taints == (Taint("gpu", "true"),)
    assert shape.facts("new-1").labels["kubernetes.io/hostname"] == "new-1"
    untolerated = make_pod("p").gpu_memory_mib(4_096).build()
    hint = hints(snapshot, [untolerated], shapes_of(snapshot), policy())
    assert verdicts(hint) == [Blocker.CONSTRAINT] and hint.additions == ()  # a new node is tainted too


def test_a_node_whose_pods_fit_in_holes_elsewhere_is_drainable_and_one_with_unknown_pods_is_not() -> None:
    cluster = Cluster(make_node("n1").gpus(2, *V100).build(), make_node("n2").gpus(2, *V100).build(),
                      make_node("n3").gpus(2, *V100).free(200).build())
    cluster.run("a", make_pod("a").gpu_memory_mib(4_096).build(), "n1", 0)
    cluster.run("b1", make_pod("b1").gpu_memory_mib(12_288).build(), "n2", 0)
    cluster.run("b2", make_pod("b2").gpu_memory_mib(12_288).build(), "n2", 1)
    hint = hints(cluster.snapshot, [], shapes_of(cluster.snapshot), policy(), running=cluster.running)
    assert [d.node for d in hint.drains] == ["n1"]  # n2's pods have no 12 GiB hole once n1 is closed
    (move,) = hint.drains[0].moves
    assert (move.uid, move.from_node) == ("a", "n1") and move.to_node == "n2"  # into the 4 GiB hole left on n2
    assert "n3" not in [d.node for d in hint.drains]  # 800m used there by pods nobody listed


def test_hint_key_changes_only_with_what_an_operator_acts_on() -> None:
    snapshot = half_used("n1")
    waiting = [make_pod("p").gpu_memory_mib(12_288).build()]
    first = hints(snapshot, waiting, shapes_of(snapshot), policy())
    again = hints(snapshot, waiting, shapes_of(snapshot), policy())
    more = hints(snapshot, [*waiting, make_pod("q").gpu_memory_mib(12_288).build()], shapes_of(snapshot), policy())
    assert first.key() == again.key()
    assert first.key() != more.key()


def test_appended_extends_every_row_array_and_merges_gpu_types() -> None:
    snapshot = ClusterSnapshot([make_node("n1").gpus(1, *V100).free(300).build()])
    grown = snapshot.appended([Node.with_gpus("n2", 8000, 4096, 4, "A100-40GB", 40_960)])
    assert grown.node_names == ("n1", "n2") and grown.max_gpus == 4 and grown.uid != snapshot.uid
    assert grown.gpu_types[grown.gpu_type_id[1]].model == "A100-40GB"
    assert grown.free_share_milli.tolist() == [[300, 0, 0, 0], [1000] * 4]
    assert grown.gpu_exists.tolist() == [[True, False, False, False], [True] * 4]
    assert grown.gpu_pods_by_kind.shape == (2, 5)
    assert np.array_equal(grown.cpu_free_milli, [64_000, 8000])
    assert snapshot.n_nodes == 1 and snapshot.max_gpus == 1  # unchanged
    with pytest.raises(ValueError, match="already in the cluster"):
        snapshot.appended([Node.with_gpus("n1", 1000, 1024, 1, "A100-40GB", 40_960)])
    with pytest.raises(ValueError, match="facts"):
        snapshot.appended([Node("n3", 1000, 1024)], [NodeFacts("n3")])


def test_appended_rows_get_facts_and_rules_see_them() -> None:
    snapshot = ClusterSnapshot([make_node("n1").gpus(1, *V100).build()], [NodeFacts("n1", {"pool": "a"})])
    grown = snapshot.appended([make_node("n2").gpus(1, *V100).build()], [NodeFacts("n2", {"pool": "b"})])
    mask = grown.static_mask(PodRules(node_selector=(("pool", "b"),)))
    assert mask is not None and mask.tolist() == [False, True]


def test_appended_rows_are_judged_by_rules_the_original_already_judged() -> None:
    """The per-rules caches of the facts are the original's until rows are added: then they must be computed again
    (found in CI: a hint's trial snapshot reused the original's 2-row NodeRules reasons on 3 rows)."""
    snapshot = ClusterSnapshot([make_node("n1").gpus(1, *V100).build()], [NodeFacts("n1", {"pool": "a"})])
    rules = PodRules(node_selector=(("pool", "b"),))
    assert snapshot.static_mask(rules).tolist() == [False]
    assert snapshot.static_reasons(rules).allowed.tolist() == [False]
    grown = snapshot.appended([make_node("n2").gpus(1, *V100).build()], [NodeFacts("n2", {"pool": "b"})])
    assert grown.static_mask(rules).tolist() == [False, True]
    assert grown.static_reasons(rules).allowed.tolist() == [False, True]
