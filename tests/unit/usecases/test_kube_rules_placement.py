"""Placement keeps kube-scheduler's rules where the pod's own fields decide: every resource NodeResourcesFit
compares (ephemeral-storage, hugepages, extended resources), required terms read as kube reads them (an empty term
matches nothing, also beside gpuplace's own DRA exclusion), and fields gpuplace does not evaluate refused by name."""

from __future__ import annotations

from gpuplace.contracts.events import Requirement, SelectorTerm
from tests.builders import node_event, pod_event
from tests.unit.usecases.test_placement import service

A100 = SelectorTerm(match_expressions=(Requirement(key="gpu-model", operator="In", values=("a100",)),))


async def test_an_extended_resource_goes_only_where_the_node_has_enough_left(uow_factory, api):
    placement = service(uow_factory, api)
    await placement.on_node(node_event("plain", gpus=0))
    await placement.on_node(node_event("fpga", gpus=0, resources={"example.com/fpga": 2, "ephemeral-storage": 2**40}))
    for name in ("a", "b", "c"):
        await placement.on_pod(pod_event(name, memory_mib=None, resources={"example.com/fpga": 1}))
    await placement.drain()
    # two FPGAs on one node: a and b there, c waits (kube: "Insufficient example.com/fpga"), none on "plain"
    assert api.bound == {("robots", "a"): "fpga", ("robots", "b"): "fpga"}
    assert any("Insufficient example.com/fpga" in report[-1] for report in api.reports if report[2] == "c")


async def test_ephemeral_storage_is_charged_and_given_back(uow_factory, api):
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1", gpus=0, resources={"ephemeral-storage": 100 * 2**30}))
    big = pod_event("big", memory_mib=None, resources={"ephemeral-storage": 60 * 2**30})
    await placement.on_pod(big)
    await placement.on_pod(pod_event("second", memory_mib=None, resources={"ephemeral-storage": 60 * 2**30}))
    await placement.drain()
    assert list(api.bound) == [("robots", "big")]  # 60 + 60 GiB > 100 GiB
    api.gone.add("big")
    await placement.on_pod(pod_event("big", uid=big.uid, kind="deleted", memory_mib=None))
    await placement.drain()
    assert api.bound[("robots", "second")] == "n1"


async def test_an_empty_required_term_matches_no_node_even_for_a_gpu_pod(uow_factory, api):
    # gpuplace adds "not a DRA node" to a GPU pod's terms (usecases/dra.avoid_dra_nodes); an empty term must
    # stay empty, as component-helpers' NewLazyErrorNodeSelector skips it: it selects no node.
    placement = service(uow_factory, api)
    await placement.on_node(node_event("v100", labels={"gpu-model": "v100"}))
    await placement.on_node(node_event("a100", labels={"gpu-model": "a100"}))
    await placement.on_pod(pod_event("nowhere", required_terms=(SelectorTerm(),)))
    await placement.on_pod(pod_event("a100-only", required_terms=(SelectorTerm(), A100)))
    await placement.drain()
    assert api.bound == {("robots", "a100-only"): "a100"}


async def test_a_pod_with_a_field_gpuplace_does_not_evaluate_is_refused_naming_it(uow_factory, api):
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1"))
    await placement.on_pod(pod_event("spread", unevaluated=("spec.topologySpreadConstraints",)))
    await placement.drain()
    assert api.bound == {}
    assert api.reports == [("unschedulable", "robots", "spread", "gpuplace does not evaluate "
                            "spec.topologySpreadConstraints; remove it or schedule the pod with kube-scheduler")]
