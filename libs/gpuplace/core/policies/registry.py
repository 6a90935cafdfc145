"""The one map of policy names to factories (scheduler-plugins' main.go, in Python).

Adding a policy is one line here: `<module>.NAME: <module>.<Class>`, where the class is built from a
PolicyContext and implements framework.interface.Policy.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuplace.core.framework.interface import Policy, PolicyContext
from gpuplace.core.policies import exclusive, fgd, gpuplace
from gpuplace.core.policies.baselines import best_fit, dot_prod, gpu_clustering, gpu_packing, random_fit

PolicyFactory = Callable[[PolicyContext], Policy]

POLICIES: dict[str, PolicyFactory] = {
    random_fit.NAME: random_fit.RandomFit,
    dot_prod.NAME: dot_prod.DotProd,
    gpu_clustering.NAME: gpu_clustering.GpuClustering,
    gpu_packing.NAME: gpu_packing.GpuPacking,
    best_fit.NAME: best_fit.BestFit,
    fgd.NAME: fgd.Fgd,
    exclusive.NAME: exclusive.Exclusive,
    gpuplace.NAME: gpuplace.Gpuplace,
}

PAPER_POLICIES = ("random", "dotprod", "gpu-clustering", "gpu-packing", "bestfit", "fgd")
"""The paper's six, in the order of its tables."""


class UnknownPolicy(ValueError):
    pass


def names() -> tuple[str, ...]:
    return tuple(POLICIES)


def create(name: str, context: PolicyContext) -> Policy:
    """Build the policy registered under `name` (UnknownPolicy lists the known names)."""
    try:
        factory = POLICIES[name]
    except KeyError:
        raise UnknownPolicy(f"unknown policy {name!r}; known: {', '.join(POLICIES)}") from None
    return factory(context)


__all__ = ["PAPER_POLICIES", "POLICIES", "PolicyFactory", "UnknownPolicy", "create", "names"]
