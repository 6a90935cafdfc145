"""Which optional APIs a cluster serves, asked of its apiserver (discovery) rather than assumed from a setting.

gpuplace's chart accepts every Kubernetes from 1.27, and DRA (`resource.k8s.io/v1`) is GA only from 1.34 (and can
be turned off there with --runtime-config). A watcher that watched ResourceSlices on a cluster without them would
get 404 forever, and hold every node waiting for the slices' first list. So cluster-watcher asks at start, and
again whenever a DRA watch answers 404: without the API, nodes are published from their device-plugin resources
and labels as before DRA, and the log says so once, as /readyz does (ApiHealth.notes).
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

from gpuplace.adapters.kube.api_health import ApiHealth
from gpuplace.adapters.kube.cluster_api import KubeClusterApi

log = logging.getLogger(__name__)

DRA_GROUP, DRA_VERSION = "resource.k8s.io", "v1"
DRA_API = f"{DRA_GROUP}/{DRA_VERSION}"
DISCOVERY = "discovery"  # what ApiHealth calls a discovery that failed


@dataclass(frozen=True)
class ServedApis:
    """What the cluster serves of what gpuplace can use; `dra` only when wanted (GPUPLACE_DRA_ENABLED) too."""

    dra: bool


async def discover(api: KubeClusterApi, health: ApiHealth, *, dra_wanted: bool, stop: asyncio.Event,
                   max_backoff_s: float = 30.0) -> ServedApis | None:
    """Ask the apiserver until it answers (None when `stop` is set first). A failed discovery is reported to
    `health` (not ready, with the meaning of its status: rejected credentials, say) and tried again after a
    growing pause; the DRA note in `health.notes` says what the cluster lacks."""
    if not dra_wanted:  # GPUPLACE_DRA_ENABLED=false: the operator's choice, nothing to note
        return ServedApis(dra=False)
    backoff_s = 0.5
    while not stop.is_set():
        health.listing(DISCOVERY)
        try:
            versions = await api.served_versions(DRA_GROUP)
        except (ApiException, OSError, aiohttp.ClientError) as exc:
            log.warning("cluster %s: discovery of %s failed: %s; retrying in %.1fs", health.cluster, DRA_GROUP,
                        health.failed(DISCOVERY, exc), backoff_s)
            await asyncio.sleep(backoff_s * (1 + random.random() / 2))
            backoff_s = min(backoff_s * 2, max_backoff_s)
            continue
        health.ended(DISCOVERY)
        served = DRA_VERSION in versions
        _tell(health, served, versions)
        return ServedApis(dra=served)
    return None


def _tell(health: ApiHealth, served: bool, versions: set[str]) -> None:
    """One log line when what the cluster serves changes (or is first learnt), and the note /readyz shows."""
    changed = health.served.get(DRA_API) != served
    health.served[DRA_API] = served
    if served:
        health.notes.pop(DRA_API, None)
        if changed:
            log.info("cluster %s serves %s: GPUs from gpu.nvidia.com ResourceSlices, pods' ResourceClaims allocated",
                     health.cluster, DRA_API)
        return
    others = f" (it serves {', '.join(sorted(versions))} of {DRA_GROUP}, which gpuplace does not read)" \
        if versions else ""
    health.notes[DRA_API] = (f"DRA off in cluster {health.cluster}: its apiserver serves no {DRA_API}{others}; "
                             "nodes' GPUs come from their device-plugin resources (nvidia.com/gpu) and GPU Feature "
                             "Discovery labels")
    if changed:
        log.warning("%s", health.notes[DRA_API])


__all__ = ["DISCOVERY", "DRA_API", "DRA_GROUP", "DRA_VERSION", "ServedApis", "discover"]
