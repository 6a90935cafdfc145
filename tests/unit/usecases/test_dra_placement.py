"""Placement of pods with DRA claims (usecases/dra.py): only on nodes whose GPUs a DRA driver publishes, the claim
handed to the binder, and another scheduler's allocated claim charged on exactly its GPU."""

from __future__ import annotations

from gpuplace.contracts.events import DraClaim, DraDevice, GpuRequest
from tests.builders import node_event, pod_event
from tests.unit.usecases.test_placement import service

CLAIM = DraClaim(name="slam-gpu-x1", uid="claim-uid", driver="gpu.nvidia.com", request="gpu", memory="9420Mi")


async def test_a_claim_pod_goes_to_a_dra_node_and_its_claim_to_the_binder(uow_factory, api):
    placement = service(uow_factory, api)
    await placement.on_node(node_event("labelled", gpus=8))  # GPUs from labels: its driver cannot allocate claims
    await placement.on_node(node_event("dra", gpus=2, dra_driver="gpu.nvidia.com"))
    await placement.on_pod(pod_event("slam", dra_claims=(CLAIM,)))
    await placement.drain()
    assert api.bound == {("robots", "slam"): "dra"}
    assignment, claim = api.assignments[("robots", "slam")], api.claims[("robots", "slam")]
    assert claim is not None and claim["name"] == "slam-gpu-x1" and claim["memory"] == "9420Mi"
    assert [g["memory_mib"] for g in assignment["gpus"]] == [9420]


async def test_another_schedulers_allocated_claim_is_charged_on_its_gpu(uow_factory, api):
    placement = service(uow_factory, api)
    await placement.on_node(node_event("dra", gpus=2, dra_driver="gpu.nvidia.com"))
    # kube-scheduler allocated 10000 MiB of gpu-1 (not the GPU gpuplace would guess: the fullest that fits, gpu-0)
    held = DraClaim(name="k-gpu", uid="k-claim", driver="gpu.nvidia.com", node="dra",
                    devices=(DraDevice(index=1, memory_mib=10000),))
    await placement.on_pod(pod_event("k", kind="bound", node_name="dra", managed=False, dra_claims=(held,),
                                     gpu=GpuRequest(gpu_count=1, memory_mib_per_gpu=10000)))
    gpus = {g["index"]: g["memory_assigned_mib"] for g in uow_factory.db.gpus.values()}
    assert gpus == {0: 0, 1: 10000}
    # two 8000 MiB claims: one on gpu-0, and gpu-1's 6384 MiB left are too few for the second
    await placement.on_pod(pod_event("a", memory_mib=8000, dra_claims=(CLAIM.model_copy(update={"name": "a"}),)))
    await placement.on_pod(pod_event("b", memory_mib=8000, dra_claims=(CLAIM.model_copy(update={"name": "b"}),)))
    await placement.on_pod(pod_event("c", memory_mib=8000, dra_claims=(CLAIM.model_copy(update={"name": "c"}),)))
    await placement.drain()
    assert sorted(api.bound) == [("robots", "a"), ("robots", "b")]
    assert sorted(g["index"] for a in api.assignments.values() for g in a["gpus"]) == [0, 0]


async def test_a_gpu_pod_without_a_claim_stays_off_dra_nodes(uow_factory, api):
    placement = service(uow_factory, api)
    await placement.on_node(node_event("dra", gpus=2, dra_driver="gpu.nvidia.com"))
    await placement.on_pod(pod_event("annotated"))  # gpuplace.io/gpu-memory: no device plugin on a DRA node
    await placement.on_pod(pod_event("cpu-only", memory_mib=None))
    await placement.drain()
    assert api.bound == {("robots", "cpu-only"): "dra"}
    await placement.on_node(node_event("labelled", gpus=1))
    await placement.drain()
    assert api.bound[("robots", "annotated")] == "labelled"
