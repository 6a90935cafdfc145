"""The defrag package lists its modules in __all__ (house rule 11), and they import."""

import importlib
import pkgutil

from gpuplace.core import defrag


def test_all_lists_every_module_and_nothing_else():
    modules = {m.name for m in pkgutil.iter_modules(defrag.__path__)}
    assert modules == set(defrag.__all__)
    for name in defrag.__all__:
        module = importlib.import_module(f"gpuplace.core.defrag.{name}")
        assert all(hasattr(module, public) for public in module.__all__)
