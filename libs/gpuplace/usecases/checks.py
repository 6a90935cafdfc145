"""Destructive input is believed only when the apiserver agrees (DESIGN §5, issue 20 and 40): the checks placement
runs before it applies an event that would free GPUs, raise a node's capacity or move a pod's charge. A check that
fails raises contracts.Rejected, and the consumer dead-letters the event."""

from __future__ import annotations

from collections.abc import Mapping

from gpuplace.contracts.events import NodeEvent, PodEvent
from gpuplace.contracts.rejected import Rejected
from gpuplace.usecases.cluster_state import ClusterState
from gpuplace.usecases.ports import ClusterApi, NodeCapacity
from gpuplace.usecases.reconcile import confirmed_gone


class ApiserverChecks:
    def __init__(self, cluster_apis: Mapping[str, ClusterApi]) -> None:
        self._apis = cluster_apis

    def served(self, cluster: str) -> None:
        """Refuse an event for a cluster this worker has no apiserver for: it could not bind there, nor check
        a deletion, and rows written for it would be nobody's."""
        if cluster not in self._apis:
            raise Rejected(f"cluster {cluster!r} is not one this placement worker serves "
                           f"(its kubeconfigs name {', '.join(sorted(self._apis)) or 'none'})")

    async def deleted(self, event: PodEvent) -> None:
        """A deletion frees GPUs the next pod takes at once, so it is applied only when the apiserver agrees the
        pod holds nothing: a `deleted` event for a pod still running (forged on the broker, or a bug upstream)
        is refused, never trusted (issue 20: one forged event put 24,576 MiB on a 16,384 MiB GPU)."""
        if not await confirmed_gone(self._apis[event.cluster], event.namespace, event.name, event.uid):
            raise Rejected(f"pod {event.namespace}/{event.name} (uid {event.uid}) still runs on the apiserver: "
                           "its deletion is not applied")

    async def node(self, state: ClusterState, event: NodeEvent) -> None:
        """A node event that would let more be placed than before is applied only when the apiserver agrees: a
        deletion (it frees nothing now, but an absent node takes no pods) only when the node is gone, a capacity
        above what placement holds for the node only when the node object says so (issue 40: a forged record
        raised a GPU's memory and three pods landed on a 16 GiB GPU). New nodes, and GPUs a DRA driver's slices
        describe rather than the node object, are not checked."""
        api = self._apis[event.cluster]
        if event.kind == "deleted":
            if await api.node_capacity(event.name) is not None:
                raise Rejected(f"node {event.name} is still on the apiserver: its deletion is not applied")
            return
        claimed = NodeCapacity(event.cpu_milli, event.memory_mib, event.gpu_count, event.gpu_memory_mib)
        held = state.capacities.get(event.name)
        if event.dra_driver is None and held is not None and not held.holds(claimed):
            live = await api.node_capacity(event.name)
            if live is None or not live.holds(claimed):
                raise Rejected(f"node {event.name}: the event says {claimed}, the apiserver {live}: not applied")
        state.capacities[event.name] = claimed

    async def bound(self, event: PodEvent, where: str) -> None:
        """A `bound` event that contradicts what placement holds (a pod it has waiting, or bound elsewhere) moves
        a pod's charge, so it is applied only when the apiserver agrees: the pod of that uid runs on (or is
        nominated for) `where`. A forged one (issue 40: it kept a pending pod unplaced for good) is refused."""
        live = await self._apis[event.cluster].read_pod(event.namespace, event.name)
        meta, spec, status = (live or {}).get("metadata") or {}, (live or {}).get("spec") or {}, \
            (live or {}).get("status") or {}
        if meta.get("uid") != event.uid or where not in (spec.get("nodeName"), status.get("nominatedNodeName")):
            raise Rejected(f"pod {event.namespace}/{event.name} (uid {event.uid}) is not bound to {where} on the "
                           "apiserver: its bound event is not applied")


__all__ = ["ApiserverChecks"]
