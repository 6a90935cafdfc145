"""Each package of the core lists its modules in __all__ (house rule 11), and they import."""

import importlib
import pkgutil

import pytest

PACKAGES = [
    "gpuplace.core.framework", "gpuplace.core.filters", "gpuplace.core.policies",
    "gpuplace.core.policies.baselines", "gpuplace.traces",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_lists_every_module_and_nothing_else(name):
    package = importlib.import_module(name)
    modules = {m.name for m in pkgutil.iter_modules(package.__path__)}
    listed = set(package.__all__)
    assert modules <= listed, f"{name}: not in __all__: {sorted(modules - listed)}"
    for public in listed:
        assert hasattr(package, public) or importlib.import_module(f"{name}.{public}")


def test_the_core_lists_the_modules_of_the_placement_core():
    # other packages of the core (defrag, latency) are listed by their owners; these must be there
    import gpuplace.core

    mine = {"arrivals", "demand", "filters", "fragmentation", "framework", "gpu_selection", "kpi", "model",
            "node_states", "policies", "simulator", "snapshot", "workload"}
    assert mine <= set(gpuplace.core.__all__)
    for public in mine:
        importlib.import_module(f"gpuplace.core.{public}")
