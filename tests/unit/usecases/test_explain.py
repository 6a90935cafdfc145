"""`gpuplace explain`'s assembly on in-memory ports, after real placement and defragmentation runs: a bound
pod's place, policy and score against the runners-up; a waiting pod's reasons per node class, with the filter,
and its aborted plan; a moved pod's plan, beneficiary and replacement; unknown and ambiguous names."""

import pytest

from gpuplace.usecases.decide import decider
from gpuplace.usecases.explain import ExplainError, explain
from gpuplace.usecases.placement import PlacementService
from tests.builders import node_event, pod_event
from tests.fakes import FakeClusterApi, FakeUnitOfWorkFactory
from tests.unit.usecases.test_defrag import fragmented_fleet

V100, A100 = "Tesla-V100-SXM2-16GB", "NVIDIA-A100-SXM4-40GB"


async def test_a_bound_pod_says_where_by_which_policy_and_its_score_against_the_runners_up():
    uow_factory, api = FakeUnitOfWorkFactory(), FakeClusterApi()
    placement = PlacementService(uow_factory, {"east": api}, decider("bestfit"), policy="bestfit")
    for name in ("n1", "n2", "n3"):
        await placement.on_node(node_event(name))
    await placement.on_pod(pod_event("slam-0"))
    await placement.drain()

    found = await explain(uow_factory, "robots/slam-0")
    assert (found.state, found.placed_by, found.policy) == ("bound", "policy", "bestfit")
    assert found.node == api.bound[("robots", "slam-0")]
    assert [(g.node, g.model, g.memory_mib) for g in found.gpus] == [(found.node, V100, 9420)]
    assert found.score is not None and len(found.runners_up) == 2  # the other two nodes could take it too
    assert {c.node for c in found.runners_up} == {"n1", "n2", "n3"} - {found.node}
    assert all(float(c.score) <= float(found.score) for c in found.runners_up)
    assert found.waited_s is not None and found.waited_s >= 0 and not found.reasons
    text = found.text()
    assert f"on node {found.node}" in text and "placed by policy bestfit" in text and "runners-up:" in text
    assert found.as_json()["runners_up"][0]["node"] == found.runners_up[0].node


async def test_a_waiting_pod_gives_the_filter_per_node_class_its_attempts_and_the_plan_a_budget_refused():
    uow_factory, api, placement, _ = await fragmented_fleet(refuse=True)
    await placement.on_pod(pod_event("urgent", memory_mib=12000, priority=100, deadline_ms=33.0))
    await placement.drain()

    found = await explain(uow_factory, "urgent", namespace="robots", cluster="east")
    assert found.waiting and found.state == "unschedulable"
    assert set(found.reasons) == {V100, A100}
    assert found.reasons[V100].startswith("2 node(s): 0 of 1 GPU(s)") and found.reasons[V100].endswith("(GpuFit)")
    assert "largest hole" in found.reasons[A100] and "(GpuFit)" in found.reasons[A100]
    assert found.attempts >= 1 and found.first_attempt_at is not None and found.latest_attempt_at is not None
    (plan,) = found.defrag_plans
    assert plan.outcome == "aborted" and "PodDisruptionBudget" in (plan.reason or "") and plan.node == "n1"
    text = found.text()
    assert "waits because:" in text and f"{V100}: 2 node(s)" in text and "aborted" in text
    assert found.as_json()["waiting"] is True


async def test_a_moved_pod_names_the_plan_its_beneficiary_and_where_its_replacement_went():
    uow_factory, api, placement, victim = await fragmented_fleet()
    await placement.on_pod(pod_event("urgent", memory_mib=12000, priority=100, deadline_ms=33.0))
    await placement.drain()
    api.gone.add("victim-0")
    await placement.on_pod(pod_event("victim-0", uid=victim.uid, kind="deleted"))
    replacement = pod_event("victim-1", memory_mib=9000, priority=0).model_copy(update={"owner": "ReplicaSet/victim"})
    await placement.on_pod(replacement)
    await placement.drain()

    moved = await explain(uow_factory, "victim-0")
    assert moved.moved is not None and moved.state == "deleted"
    assert (moved.moved.beneficiary, moved.moved.from_node, moved.moved.from_gpus, moved.moved.to_node) == \
        ("robots/urgent", "n1", [0], "n3")
    assert (moved.moved.replacement, moved.moved.replacement_node, moved.moved.replacement_state) == \
        ("robots/victim-1", "n3", "bound")
    assert "by a defragmentation plan for robots/urgent, from node n1 GPU(s) 0" in moved.text()

    beneficiary = await explain(uow_factory, "urgent")
    assert (beneficiary.state, beneficiary.node, beneficiary.placed_by) == ("bound", "n1", "defragmentation")
    assert [p.outcome for p in beneficiary.defrag_plans] == ["completed"]
    assert (await explain(uow_factory, "victim-1")).placed_by == "promise"


async def test_an_unknown_pod_and_a_name_used_in_two_clusters_are_one_line_errors():
    uow_factory, api = FakeUnitOfWorkFactory(), FakeClusterApi()
    placement = PlacementService(uow_factory, {"east": api, "west": api}, decider("bestfit"), policy="bestfit")
    for cluster in ("east", "west"):
        await placement.on_node(node_event("n1", cluster=cluster))
        await placement.on_pod(pod_event("slam-0", cluster=cluster))
    await placement.drain()
    with pytest.raises(ExplainError, match="never saw a pod named 'ghost'"):
        await explain(uow_factory, "ghost")
    with pytest.raises(ExplainError, match="ambiguous: east/robots/slam-0, west/robots/slam-0"):
        await explain(uow_factory, "slam-0")
    assert (await explain(uow_factory, "slam-0", cluster="west")).cluster == "west"
    with pytest.raises(ExplainError, match="disagree"):
        await explain(uow_factory, "robots/slam-0", namespace="other")


async def test_a_pod_older_than_the_decisions_pruned_says_its_story_was_pruned_and_a_pruned_pod_says_why_unknown():
    from gpuplace.usecases.ports import Retained
    from gpuplace.usecases.retention import RetentionPolicy, prune_round

    uow_factory, api = FakeUnitOfWorkFactory(), FakeClusterApi()
    placement = PlacementService(uow_factory, {"east": api}, decider("bestfit"), policy="bestfit")
    await placement.on_node(node_event("n1"))
    kept, gone = pod_event("kept"), pod_event("gone")
    for event in (kept, gone):
        await placement.on_pod(event)
    await placement.drain()
    assert "were pruned" not in (await explain(uow_factory, "robots/kept")).text()
    api.delete_pod("robots", "gone")
    await placement.on_pod(pod_event("gone", uid=gone.uid, kind="deleted"))
    # every decision and deleted pod so far is older than this round's cut-off
    policy = RetentionPolicy({Retained.DECISIONS: 1e-9, Retained.DELETED_PODS: 1e-9})
    await prune_round(uow_factory, policy)

    found = await explain(uow_factory, "robots/kept")
    assert found.state == "bound" and found.placed_by is None  # its `decided` was pruned
    assert found.decisions_pruned_before is not None
    assert "were pruned (retention, GPUPLACE_RETENTION_DECISIONS_DAYS)" in found.text()
    with pytest.raises(ExplainError, match=r"never saw a pod named 'gone' \(namespace robots\), or it was deleted "
                                           r"and pruned \(deleted pods first seen before 1970-"):
        await explain(uow_factory, "robots/gone")
