"""Where the local stack is: environment variables first, then `$GPUPLACE_STACK_DIR/env` written by
`deploy/local/stack.sh up`. Used by the demo, the benchmarks and the test fixtures."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

DEFAULT_STACK_DIR = "/tmp/gpuplace-stack"


def stack_dir() -> Path:
    return Path(os.environ.get("GPUPLACE_STACK_DIR", DEFAULT_STACK_DIR))


def stack_env() -> dict[str, str]:
    """Variables from the stack's env file (empty when the stack never ran)."""
    path = stack_dir() / "env"
    if not path.exists():
        return {}
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line.startswith("export "):
            line = line[len("export "):]
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, raw = line.split("=", 1)
        parts = shlex.split(raw)
        values[key.strip()] = " ".join(parts)
    return values


def resolve(name: str) -> str | None:
    """One setting: the process environment wins over the stack's env file."""
    return os.environ.get(name) or stack_env().get(name)


def cluster_kubeconfigs() -> dict[str, str]:
    """cluster name -> kubeconfig, from GPUPLACE_KUBECONFIG_<CLUSTER> variables (env, then stack file)."""
    merged = {**stack_env(), **os.environ}
    prefix = "GPUPLACE_KUBECONFIG_"
    found = {k[len(prefix):].lower().replace("_", "-"): v for k, v in merged.items() if k.startswith(prefix) and v}
    if not found and merged.get("KUBECONFIG"):
        found = {"east": merged["KUBECONFIG"]}
    return dict(sorted(found.items()))


__all__ = ["stack_dir", "stack_env", "resolve", "cluster_kubeconfigs"]
