"""Headroom for the acting autoscaler (scaling.py): room kept for perception pods not yet asked for.

A reactive autoscaler makes a pod that needs a new node wait at least the node's provisioning delay (minutes),
so it cannot keep a wait under a minute for the pods it adds nodes for. Clusters that must do so keep spare room,
as cluster-autoscaler users do with low-priority placeholder pods ("overprovisioning"): here, per perception
deployment of a cluster, `fraction` of its desired replicas (rounded up) of its current version, which the
autoscaler must be able to place beside the waiting pods (it adds nodes when they do not fit) and which keep a node
it added from being removed while they would not fit without it. The placeholders never run: the room is not
reserved, so a training job may take it between two ticks, and the next tick adds a node for it.
"""

from __future__ import annotations

import math
from dataclasses import replace

from gpuplace.core.latency.model import Stream
from gpuplace.core.model import MILLI_PER_GPU, Pod
from gpuplace.core.snapshot import ClusterSnapshot, kind_of
from gpuplace.sim.fleet.plan import FleetPlan, perception_pod, replicas

PREFIX = "headroom"


def placeholders(plan: FleetPlan, cluster: str, now_s: float, fraction: float) -> tuple[list[Pod], dict[str, Stream]]:
    """The placeholder pods of `cluster` at `now_s` (module docstring) and their streams, by pod name."""
    pods: list[Pod] = []
    streams: dict[str, Stream] = {}
    if fraction <= 0:
        return pods, streams
    for d in (d for d in plan.deployments if d.cluster == cluster):
        template = d.templates[sum(1 for at in d.rollouts_s if at <= now_s)]
        for k in range(math.ceil(fraction * replicas(d, now_s, plan.scenario.daily_swing))):
            pod = replace(perception_pod(d, template, k), name=f"{PREFIX}-{d.name}-{k}")
            pods.append(pod)
            streams[pod.name] = Stream(template.frame_rate_hz, template.workload_class, template.service_ms,
                                       pod.deadline_ms)
    return pods, streams


def without(snapshot: ClusterSnapshot, node: str) -> ClusterSnapshot:
    """A copy of `snapshot` in which the empty node `node` offers nothing (every resource taken)."""
    out = snapshot.copy()
    row = out.index_of(node)
    gpus = int(out.gpu_count[row])
    out.charge(row, tuple(range(gpus)), int(out.cpu_free_milli[row]), int(out.memory_free_mib[row]),
               MILLI_PER_GPU if gpus else 0, int(out.gpu_memory_mib[row]) if gpus else 0,
               kind_of(gpus, MILLI_PER_GPU))
    return out


__all__ = ["PREFIX", "placeholders", "without"]
