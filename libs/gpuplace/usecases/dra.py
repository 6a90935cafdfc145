"""Pods that use DRA ResourceClaims (resource.k8s.io/v1), as placement sees them.

A node's GPUs come from its ResourceSlice (NodeEvent.dra_driver names the driver); a pod's GPUs from its claim
(PodEvent.dra_claims). Two rules follow from what the node's driver can prepare:
- a pod gpuplace places through a claim goes only to a node whose GPUs the driver publishes: the node carries the
  label DRA_NODE_LABEL in gpuplace's state (not in Kubernetes) and the pod requires it; a pod asking for GPUs
  otherwise (annotations, device plugin resources) goes only to nodes without it;
- a pod whose claim is allocated already (by kube-scheduler, or by gpuplace before a restart) is charged on exactly
  the GPUs of the allocation, with the memory each consumes, never where gpuplace would guess.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

DRA_NODE_LABEL = "gpuplace.io/dra-driver"
MILLI_PER_GPU = 1000


def node_labels(labels: Mapping[str, str], dra_driver: str | None) -> dict[str, str]:
    """The labels gpuplace stores for a node: its own, plus DRA_NODE_LABEL when a DRA driver publishes its GPUs."""
    return {**labels, DRA_NODE_LABEL: dra_driver} if dra_driver else dict(labels)


def require_driver(rules: dict[str, Any], driver: str) -> dict[str, Any]:
    """A pod's stored rules (PodEvent's rule fields as JSON) with its node selector requiring `driver`'s nodes."""
    return {**rules, "node_selector": {**(rules.get("node_selector") or {}), DRA_NODE_LABEL: driver}}


def avoid_dra_nodes(rules: dict[str, Any]) -> dict[str, Any]:
    """A GPU pod's stored rules with its node affinity excluding DRA nodes: there no device plugin hands out GPUs
    (the node's GPUs belong to its DRA driver, which prepares only what claims allocate).

    The pod's own terms keep their meaning: (t1 or t2 ...) and not-DRA is (t1 and not-DRA) or (t2 and not-DRA),
    so the exclusion is added to each term that can match, and an empty term, which matches no node in
    Kubernetes, stays empty (given an expression, it would match every node without the label). A pod with no
    required terms gets the exclusion as its one term."""
    avoid = {"key": DRA_NODE_LABEL, "operator": "DoesNotExist", "values": []}
    terms = rules.get("required_terms")
    if not terms:
        return {**rules, "required_terms": [{"match_expressions": [avoid], "match_fields": []}]}
    return {**rules, "required_terms": [
        {**t, "match_expressions": [*(t.get("match_expressions") or []), avoid]}
        if t.get("match_expressions") or t.get("match_fields") else t for t in terms]}


def claimed_gpus(claims: Sequence[Mapping[str, Any]], node: str, gpu_memory_mib: int
                 ) -> tuple[tuple[int, ...], int, int] | None:
    """(GPU indices, share milli, memory MiB per GPU) that a pod's allocated claims hold on `node`, or None when
    none is allocated there. A device consumed whole (no consumedCapacity) counts the GPU's memory; several devices
    are charged the most any of them consumes (one memory per pod and GPU in gpuplace's state: never less)."""
    indices: set[int] = set()
    memory = 0
    for claim in claims:
        if claim.get("node") != node:
            continue
        for device in claim.get("devices") or ():
            indices.add(int(device["index"]))
            used = device.get("memory_mib")
            memory = max(memory, gpu_memory_mib if used is None else min(int(used), gpu_memory_mib))
    if not indices:
        return None
    share = MILLI_PER_GPU if gpu_memory_mib <= 0 or memory >= gpu_memory_mib else \
        min(MILLI_PER_GPU, max(1, memory * MILLI_PER_GPU // gpu_memory_mib))
    return tuple(sorted(indices)), share, memory


__all__ = ["DRA_NODE_LABEL", "node_labels", "require_driver", "avoid_dra_nodes", "claimed_gpus"]
