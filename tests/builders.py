"""Events that read like the cluster they describe (kube's st.MakePod style)."""

from __future__ import annotations

import itertools
from typing import Any

from gpuplace.contracts.events import GpuRequest, NodeEvent, PodEvent

_uids = itertools.count(1)


def node_event(name: str, *, cluster: str = "east", gpus: int = 2, gpu_memory_mib: int = 16384,
               model: str = "Tesla-V100-SXM2-16GB", cpu_milli: int = 64000, deleted: bool = False,
               **fields: Any) -> NodeEvent:
    """`fields`: any other NodeEvent field (labels, taints, unschedulable, ready, max_pods, extended)."""
    return NodeEvent(cluster=cluster, kind="deleted" if deleted else "upsert", name=name, cpu_milli=cpu_milli,
                     memory_mib=262144, gpu_model=model, gpu_count=gpus, gpu_memory_mib=gpu_memory_mib, **fields)


def pod_event(name: str, *, cluster: str = "east", memory_mib: int | None = 9420, uid: str | None = None,
              kind: str = "pending", priority: int = 0, deadline_ms: float | None = 80.0,
              request_error: str | None = None, node_name: str | None = None, frame_rate_hz: float | None = None,
              workload: str | None = None, gpu: GpuRequest | None = None, cpu_milli: int = 1000,
              **fields: Any) -> PodEvent:
    """`fields`: any other PodEvent field (managed, node_selector, tolerations, host_ports, ...)."""
    gpu = gpu or (GpuRequest(gpu_count=1, memory_mib_per_gpu=memory_mib) if memory_mib else None)
    return PodEvent(cluster=cluster, kind=kind, namespace="robots", name=name, uid=uid or f"uid-{next(_uids)}",
                    priority=priority, cpu_milli=cpu_milli, memory_mib=1024, gpu=gpu, deadline_ms=deadline_ms,
                    request_error=request_error, node_name=node_name, frame_rate_hz=frame_rate_hz,
                    workload=workload, **fields)
