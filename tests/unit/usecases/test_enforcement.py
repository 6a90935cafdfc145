"""A GPU share goes only where something enforces it, or, when the operator allows unenforced sharing, anywhere it
fits, with a warning Event saying nothing limits its GPU memory (usecases/enforcement, core NodeRules)."""

from __future__ import annotations

from gpuplace.core.node_rules import GPU_ENFORCEMENT_LABEL, MSG_UNENFORCED, NodeFacts, PodRules
from gpuplace.usecases import enforcement
from gpuplace.usecases.decide import decider
from gpuplace.usecases.placement import PlacementService
from tests.builders import node_event, pod_event
from tests.fakes import FakeClusterApi, FakeUnitOfWorkFactory


def test_the_node_rule_refuses_a_share_where_nothing_it_needs_enforces_it():
    rules = PodRules(gpu_enforcement=("hami", "declared"))
    assert rules.static_reason(NodeFacts("n", labels={GPU_ENFORCEMENT_LABEL: "none"})) == MSG_UNENFORCED
    assert rules.static_reason(NodeFacts("n", labels={})) == MSG_UNENFORCED  # not reported: not known to enforce
    assert rules.static_reason(NodeFacts("n", labels={GPU_ENFORCEMENT_LABEL: "hami"})) is None
    assert PodRules().static_reason(NodeFacts("n", labels={GPU_ENFORCEMENT_LABEL: "none"})) is None


async def place(*nodes, **pod_fields) -> FakeClusterApi:
    api = FakeClusterApi()
    placement = PlacementService(FakeUnitOfWorkFactory(), {"east": api}, decider("bestfit"), policy="bestfit")
    for node in nodes:
        await placement.on_node(node)
    await placement.on_pod(pod_event("slice", **pod_fields))
    await placement.drain()
    return api


async def test_a_share_waits_for_a_node_that_enforces_it():
    api = await place(node_event("plain", gpu_enforcement="none"), gpu_enforcement=("declared",))
    ((kind, _, _, message),) = api.reports
    assert kind == "unschedulable" and message == f"0/1 nodes are available: 1 {MSG_UNENFORCED}."
    api = await place(node_event("plain", gpu_enforcement="none"), node_event("site", gpu_enforcement="declared"),
                      gpu_enforcement=("declared",))
    assert api.reports == [("scheduled", "robots", "slice", "site", "(GPU 0: 9420 MiB)")]


async def test_allowed_unenforced_sharing_places_it_with_a_warning_saying_nothing_limits_its_memory():
    api = await place(node_event("plain", gpu_enforcement="none"), gpu_enforcement=("declared",),
                      unenforced_sharing=True)
    scheduled, warning = api.reports
    assert scheduled == ("scheduled", "robots", "slice", "plain", "(GPU 0: 9420 MiB)")
    assert warning[:4] == ("warning", "robots", "slice", enforcement.UNENFORCED_REASON)
    assert warning[4].startswith("nothing limits this pod's GPU memory on plain (its GPU enforcement: none")
    assert "9420 MiB of GPU 0" in warning[4] and "GPUPLACE_ALLOW_UNENFORCED_SHARING=true" in warning[4]
    # where the node does enforce it, no warning
    api = await place(node_event("site", gpu_enforcement="declared"), gpu_enforcement=("declared",),
                      unenforced_sharing=True)
    assert [r[0] for r in api.reports] == ["scheduled"]


def test_a_declared_node_shape_gets_the_enforcement_of_the_clusters_gpu_nodes():
    from gpuplace.core.model import Node
    from gpuplace.core.scale_hints import NodeShape, shapes_of
    from gpuplace.core.snapshot import ClusterSnapshot

    node = Node.with_gpus("n", 32000, 262144, 2, "Tesla-V100-SXM2-16GB", 16384)
    snapshot = ClusterSnapshot([node], [NodeFacts("n", labels={GPU_ENFORCEMENT_LABEL: "hami"})])
    declared = NodeShape("NVIDIA-A100-SXM4-40GB", 8, 40960, 96000, 786432)
    *_, added = shapes_of(snapshot, [declared])
    assert dict(added.labels) == {GPU_ENFORCEMENT_LABEL: "hami"}  # a share can be hinted a node of it
    plain = ClusterSnapshot([node], [NodeFacts("n")])
    assert shapes_of(plain, [declared])[-1] == declared  # nothing known: nothing assumed
