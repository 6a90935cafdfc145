"""Packages of the placement core list their public modules in __all__ (house rule 11), and they import.

Packages shared with other parts of the core (latency, defrag, the house policy) are checked for the
modules this part provides; their owners list theirs.
"""

import importlib
import pkgutil

import pytest

COMPLETE = ["gpuplace.core.framework", "gpuplace.core.policies.baselines", "gpuplace.sim"]
AT_LEAST = {
    "gpuplace.core": {"demand", "filters", "fragmentation", "framework", "gpu_selection", "model", "node_states",
                      "policies", "snapshot", "workload"},
    "gpuplace.core.filters": {"FILTERS", "gpu_fit", "gpu_model", "resources_fit"},
    "gpuplace.core.policies": {"baselines", "default_steps", "fgd", "gpuplace", "registry"},
    "gpuplace.traces": {"alibaba"},
}


@pytest.mark.parametrize("name", COMPLETE)
def test_all_lists_every_module(name):
    package = importlib.import_module(name)
    modules = {m.name for m in pkgutil.iter_modules(package.__path__)}
    assert modules <= set(package.__all__), f"{name}: not in __all__: {sorted(modules - set(package.__all__))}"


@pytest.mark.parametrize("name", sorted(AT_LEAST))
def test_all_lists_the_modules_of_the_placement_core(name):
    package = importlib.import_module(name)
    assert AT_LEAST[name] <= set(package.__all__)
    for public in package.__all__:
        assert hasattr(package, public) or importlib.import_module(f"{name}.{public}")
