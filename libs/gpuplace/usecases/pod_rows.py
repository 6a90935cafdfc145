"""A pod as placement writes and reads it: the pods row a PodEvent makes, the event a row stands for (what
reconciliation found the stream missed), the queue order of rows that wait, and why a pod is refused without a
decision. Shared by placement's handlers (usecases/placement.py, deciding.py, bound_news.py, resync.py) and by
replay (through usecases/event_rules.py), so they read one pod alike."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuplace.contracts.events import PodEvent
from gpuplace.core.queue import queue_key
from gpuplace.usecases import dra
from gpuplace.usecases.pod_states import PodState
from gpuplace.usecases.ports import PodRow

CONSUMER = "placement"  # the name placement claims the events it handled under (processed_events)
AWAITING_NODE = "bound to a node not yet known: charged when it arrives"
REASON_MAX = 1024  # characters of a refusal's reason: an Event's note holds 1 kB (events.k8s.io/v1 validation)
ADOPTED = "place promised as "  # reasons["defrag"] of a replacement's `decided`, then the promise's uid


@dataclass(frozen=True)
class Refusal:
    """Why a pod is refused without a decision: stored as `reason`, told on the pod as `report`."""

    reason: str
    report: str


def refusal(event: PodEvent) -> Refusal | None:
    """A pod gpuplace cannot place as asked: its GPU request does not read (`request_error`), or its spec limits
    its node by fields gpuplace does not evaluate (`unevaluated`), which it never places as if absent. The reason
    is cut to REASON_MAX characters: it quotes the manifest, which may be megabytes (issue 40 stored 250,000)."""
    if event.request_error:
        error = _cut(event.request_error)
        return Refusal(error, _cut(f"invalid GPU request: {error}"))
    if event.unevaluated:
        fields = ", ".join(event.unevaluated)
        text = f"gpuplace does not evaluate {fields}; remove it or schedule the pod with kube-scheduler"
        return Refusal(text, text)
    return None


def _cut(text: str) -> str:
    return text if len(text) <= REASON_MAX else text[:REASON_MAX - 1] + "…"


def pod_row(event: PodEvent) -> dict[str, Any]:
    """The pods row a PodEvent writes (its state `pending` until placement moves it): also replay's pod."""
    request = event.gpu.model_dump(mode="json") if event.gpu else None
    rules = event.model_dump(mode="json", include=_RULE_FIELDS)
    if event.managed and event.dra_claims:  # only where the claim's driver publishes the GPUs (usecases/dra)
        rules = dra.require_driver(rules, event.dra_claims[0].driver)
    elif event.managed and event.gpu is not None:  # and GPUs of other vocabularies only where it does not
        rules = dra.avoid_dra_nodes(rules)
    return {
        "cluster": event.cluster, "uid": event.uid, "namespace": event.namespace, "name": event.name,
        "state": PodState.PENDING, "priority": event.priority, "request": request, "cpu_milli": event.cpu_milli,
        "memory_mib": event.memory_mib, "deadline_ms": event.deadline_ms, "frame_rate_hz": event.frame_rate_hz,
        "workload": event.workload, "service_ms": event.service_ms, "owner": event.owner, "managed": event.managed,
        "rules": rules,
    }


# PodEvent fields kept in the pods row's `rules` (JSON): the node rules (GPU sharing enforcement among them);
# `hami` and `dra_claims` ride along (not rules): HAMi's bind annotations and the DRA claim the binder allocates
# need them (ClusterApi.bind)
_RULE_FIELDS = {"node_selector", "required_terms", "preferred_terms", "tolerations", "host_ports", "extended",
                "resources", "hami", "dra_claims", "gpu_enforcement", "unenforced_sharing"}


def event_of(row: PodRow, kind: str, **changes: Any) -> PodEvent:
    """The event the watcher would have sent for a tracked pod (what reconciliation found it missed)."""
    fields = ("cluster", "namespace", "name", "uid", "priority", "cpu_milli", "memory_mib", "deadline_ms",
              "frame_rate_hz", "workload", "service_ms", "owner", "managed")
    columns: Mapping[str, Any] = row
    return PodEvent.model_validate({**{k: columns[k] for k in fields}, **(row.get("rules") or {}), "kind": kind,
                                    "gpu": row["request"], **changes})


def queue_order(row: PodRow) -> tuple[int, float, Any]:
    """Where a waiting pod stands in its cluster's queue: priority, then deadline, then arrival."""
    return queue_key(priority=row["priority"], deadline_ms=row["deadline_ms"], arrival=row["first_seen_at"])


__all__ = ["ADOPTED", "AWAITING_NODE", "CONSUMER", "REASON_MAX", "Refusal", "event_of", "pod_row", "queue_order",
           "refusal"]
