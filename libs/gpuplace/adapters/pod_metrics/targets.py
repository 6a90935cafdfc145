"""Which pods of a node gpu-agent scrapes for frame latency, where, and who shares their GPU.

A pod opts in with annotations, as it would for Prometheus (`prometheus.io/port`, `prometheus.io/path`):

    gpuplace.io/latency-port: "9400"        # required: the port its metrics are served on
    gpuplace.io/latency-path: "/metrics"    # optional, /metrics by default

and is scraped once it runs on a GPU that gpuplace assigned (`gpuplace.io/gpu-assignment`), at its pod IP. Its
workload class, deadline and frame rate are its gpuplace annotations (adapters/kube/vocabulary.py); its co-runners
are the other running pods whose assignment holds the same GPU, opted in or not. A pod whose annotations cannot be
read is skipped with a reason, never guessed at.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuplace.adapters.kube.vocabulary import ASSIGNMENT, DEADLINE, WORKLOAD

LATENCY_PORT = "gpuplace.io/latency-port"
LATENCY_PATH = "gpuplace.io/latency-path"
DEFAULT_PATH = "/metrics"

Json = Mapping[str, Any]


@dataclass(frozen=True)
class ScrapeTarget:
    """One opted-in pod on one of the node's GPUs: where to scrape it and what shares its GPU."""

    uid: str
    namespace: str
    pod: str
    url: str
    workload: str
    gpu_index: int
    deadline_ms: float | None
    co_runners: tuple[str, ...]
    """namespace/name of every other running pod assigned the same GPU, sorted."""


@dataclass(frozen=True)
class Skipped:
    """An opted-in pod that cannot be scraped, and why (logged by the agent)."""

    namespace: str
    pod: str
    reason: str


def scrape_targets(pods: Iterable[Json]) -> tuple[list[ScrapeTarget], list[Skipped]]:
    """The opted-in running pods among `pods` (one node's, as the API lists them), and the ones skipped."""
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    on_gpu: dict[int, list[str]] = {}
    for pod in running:
        for index in _gpu_indices(pod) or ():
            on_gpu.setdefault(index, []).append(_key(pod))
    targets: list[ScrapeTarget] = []
    skipped: list[Skipped] = []
    for pod in running:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        if LATENCY_PORT not in annotations:
            continue
        outcome = _target(pod, annotations, on_gpu)
        if isinstance(outcome, ScrapeTarget):
            targets.append(outcome)
        else:
            skipped.append(outcome)
    return targets, skipped


def _target(pod: Json, annotations: Mapping[str, str], on_gpu: Mapping[int, list[str]]) -> ScrapeTarget | Skipped:
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    namespace, name = meta.get("namespace", ""), meta.get("name", "")
    port = annotations[LATENCY_PORT]
    if not port.isdigit() or not 0 < int(port) < 65536:
        return Skipped(namespace, name, f"{LATENCY_PORT}={port!r} is not a port number")
    path = annotations.get(LATENCY_PATH, DEFAULT_PATH)
    if not path.startswith("/"):
        return Skipped(namespace, name, f"{LATENCY_PATH}={path!r} must start with /")
    indices = _gpu_indices(pod)
    if indices is None:
        return Skipped(namespace, name, f"no readable {ASSIGNMENT}: not on a GPU gpuplace assigned")
    ip = status.get("podIP")
    if not ip:
        return Skipped(namespace, name, "no pod IP yet")
    deadline = annotations.get(DEADLINE)
    try:
        deadline_ms = float(deadline) if deadline is not None else None
    except ValueError:
        return Skipped(namespace, name, f"{DEADLINE}={deadline!r} is not a number")
    if deadline_ms is not None and not deadline_ms > 0:
        return Skipped(namespace, name, f"{DEADLINE}={deadline!r} must be > 0")
    host = f"[{ip}]" if ":" in ip else ip
    index = indices[0]
    me = _key(pod)
    return ScrapeTarget(
        uid=meta.get("uid", ""), namespace=namespace, pod=name, url=f"http://{host}:{int(port)}{path}",
        workload=annotations.get(WORKLOAD) or name, gpu_index=index, deadline_ms=deadline_ms,
        co_runners=tuple(sorted(k for k in set(on_gpu.get(index, ())) if k != me)))


def _gpu_indices(pod: Json) -> list[int] | None:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(ASSIGNMENT)
    if not raw:
        return None
    try:
        gpus = json.loads(raw)["gpus"]
        indices = [int(g["index"]) for g in gpus]
    except (ValueError, KeyError, TypeError):
        return None
    return indices or None


def _key(pod: Json) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


__all__ = ["DEFAULT_PATH", "LATENCY_PATH", "LATENCY_PORT", "ScrapeTarget", "Skipped", "scrape_targets"]
