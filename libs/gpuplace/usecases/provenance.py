"""What a decision was decided from (contracts.Provenance), computed the same way by the service and by replay.

A replayed decision that differs from the recorded one is either a different state (the view digests differ:
the log did not bring the state the service saw, e.g. telemetry or an event applied in another order) or a
different decision on the same state (a policy or configuration change: the version and config digests say
which). Digests are SHA-256 prefixes of the arrays the core decides on, so two equal states give equal digests.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from dataclasses import asdict, is_dataclass
from functools import cache
from weakref import WeakKeyDictionary

import numpy as np

from gpuplace.core.framework.interface import PolicyContext
from gpuplace.core.latency.model import LatencyModel
from gpuplace.core.policies import registry
from gpuplace.core.snapshot import ClusterSnapshot

_DIGEST_CHARS = 16


@cache
def package_version() -> str:
    """gpuplace's installed version: the version of a policy that declares no VERSION of its own."""
    try:
        return importlib.metadata.version("gpuplace")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:_DIGEST_CHARS]


def policy_version(name: str) -> str:
    """The policy's VERSION class attribute (bumped when its choices change), else the package's version."""
    return str(getattr(registry.POLICIES.get(name), "VERSION", None) or package_version())


def config_digest(policy: str, latency_margin: float, options: PolicyContext | None = None) -> str:
    """Digest of the settings a decision depends on beyond the state: the policy, its version, the margin, and the
    operator's policy settings where set (unset, the digest is the one it was before those settings existed)."""
    config: dict[str, object] = {"policy": policy, "version": policy_version(policy), "latency_margin": latency_margin}
    if options is not None and options.whole_gpu_reserve is not None:
        config["whole_gpu_reserve"] = options.whole_gpu_reserve
    if options is not None and options.expected_shapes:
        config["expected_shapes"] = [repr(request) for request in options.expected_shapes]
    return _digest(json.dumps(config, sort_keys=True).encode())


def latency_model_digest(model: LatencyModel) -> str:
    """Digest of the latency model's parameters (the default one, or one refitted from latency.v1 windows)."""
    raw = asdict(model) if is_dataclass(model) else repr(model)
    return _digest(json.dumps(raw, sort_keys=True, default=repr).encode())


def view_digest(snapshot: ClusterSnapshot | None) -> str:
    """Digest of what the core decides on: node order, free CPU, memory, GPU shares and memory, observed memory,
    open GPUs, pod slots and the request kinds per node (GpuClustering's input); and the GPU domains when some
    node describes its topology (core/topology.py), so that a cluster without it keeps the digests it had."""
    if snapshot is None:
        return _digest(b"")
    h = _names_hashed(snapshot).copy()
    for array in (snapshot.cpu_free_milli, snapshot.memory_free_mib, snapshot.free_share_milli,
                  snapshot.free_memory_mib, snapshot.observed_used_memory_mib, snapshot.gpu_exists,
                  snapshot.pods_free, snapshot.gpu_pods_by_kind):
        h.update(np.ascontiguousarray(array).data)  # its buffer, not a copy of it
    if snapshot.any_topology:
        h.update(np.ascontiguousarray(snapshot.gpu_domain).data)
    return h.hexdigest()[:_DIGEST_CHARS]


_NAMES: WeakKeyDictionary[ClusterSnapshot, hashlib._Hash] = WeakKeyDictionary()
"""Per snapshot, sha256 over its node names joined: the digest's first input, computed once per snapshot (a re-read
makes a new one) rather than for every decision (a quarter of the digest's cost at 1,000 nodes)."""


def _names_hashed(snapshot: ClusterSnapshot) -> hashlib._Hash:
    hashed = _NAMES.get(snapshot)
    if hashed is None:
        _NAMES[snapshot] = hashed = hashlib.sha256("\n".join(snapshot.node_names).encode())
    return hashed


__all__ = ["config_digest", "latency_model_digest", "policy_version", "view_digest"]
