"""The harnesses' public API is what their modules list in `__all__`: whatever the CLI, the benchmarks and the tests
import from `gpuplace.harness` is listed there, and nothing listed is private or missing.

The integration tests used to import private helpers (`_pod_manifest`, `_apis`, `_lost`) from the CLI's modules, so
renaming one broke tests that nothing said depended on it; this test makes such a dependency a listed name."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import gpuplace
import gpuplace.harness

ROOT = Path(gpuplace.__file__).resolve().parents[2]
MODULES = sorted(info.name for info in pkgutil.iter_modules(gpuplace.harness.__path__, "gpuplace.harness."))


def _imports_from_harness() -> list[tuple[str, str, str]]:
    """(importing file, harness module, name) for every `from gpuplace.harness.X import name` in the repository."""
    found = []
    for top in ("libs", "services", "tests", "bench", "examples"):
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gpuplace.harness."):
                    found += [(str(path.relative_to(ROOT)), node.module or "", alias.name) for alias in node.names]
    return found


def test_the_package_lists_every_harness_module() -> None:
    assert sorted(f"gpuplace.harness.{name}" for name in gpuplace.harness.__all__) == MODULES


@pytest.mark.parametrize("name", MODULES)
def test_every_listed_name_is_public_and_defined(name: str) -> None:
    module = importlib.import_module(name)
    listed = module.__all__
    assert len(listed) == len(set(listed)), f"{name}.__all__ repeats a name"
    assert [n for n in listed if n.startswith("_")] == []
    assert [n for n in listed if not hasattr(module, n)] == []


def test_what_others_import_from_a_harness_is_in_its_all() -> None:
    imports = _imports_from_harness()
    assert imports, "no import of gpuplace.harness found: the scan is looking in the wrong place"
    unlisted = [f"{where}: {module}.{name}" for where, module, name in imports
                if name not in importlib.import_module(module).__all__]
    assert unlisted == []
