"""GPU sharing enforcement as placement sees it (adapters/kube/enforcement.py says where it comes from).

A node's enforcement (NodeEvent.gpu_enforcement) is stored as the label GPU_ENFORCEMENT_LABEL in gpuplace's state
(not in Kubernetes), as the DRA driver is; a pod's needs (PodEvent.gpu_enforcement) ride in its stored rules, and
the core's NodeRules filter keeps it off nodes without one of them (core/node_rules.PodRules.gpu_enforcement),
unless the operator allowed unenforced sharing: then it may go anywhere it fits, and gets a warning Event when the
node it went to enforces nothing it needs (`unenforced_note`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuplace.core.node_rules import GPU_ENFORCEMENT_LABEL

UNENFORCED_REASON = "UnenforcedGpuSharing"


def node_labels(labels: Mapping[str, str], enforcement: str | None) -> dict[str, str]:
    """The labels gpuplace stores for a node: plus GPU_ENFORCEMENT_LABEL when its cluster-watcher reported one."""
    return {**labels, GPU_ENFORCEMENT_LABEL: enforcement} if enforcement else dict(labels)


def unenforced_note(rules: Mapping[str, Any] | None, node: str, node_labels: Mapping[str, str] | None,
                    memory_mib: int, gpu_indices: tuple[int, ...]) -> str | None:
    """The warning for a pod placed by the operator's leave where nothing enforces its GPU share, or None."""
    needs = (rules or {}).get("gpu_enforcement") or ()
    if not needs or not (rules or {}).get("unenforced_sharing"):
        return None
    has = (node_labels or {}).get(GPU_ENFORCEMENT_LABEL, "unknown")
    if has in needs:
        return None
    gpus = ", ".join(map(str, gpu_indices))
    return (f"nothing limits this pod's GPU memory on {node} (its GPU enforcement: {has}; a share needs "
            f"{' or '.join(needs)}): gpuplace counted {memory_mib} MiB of GPU {gpus} for it, but the pod can use "
            "more and starve the pods sharing the GPU. Placed because GPUPLACE_ALLOW_UNENFORCED_SHARING=true")


__all__ = ["UNENFORCED_REASON", "node_labels", "unenforced_note"]
