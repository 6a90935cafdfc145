"""Every module of the placement core and of gpuplace.sim says exactly what it offers in `__all__` (rule 11).

The modules are found by walking `gpuplace.core` and `gpuplace.sim` with pkgutil, so one added tomorrow
without an exact `__all__` fails here:
- every module and package has `__all__`, without repeats or private names, and every name in it resolves;
- a package lists every one of its modules, and otherwise only names its `__init__` binds itself;
- a module lists exactly the public names it defines (functions, classes, constants), none it only imports;
- whatever other modules of gpuplace (libs and services) import from a core module is in that module's `__all__`
  (the tests may reach further in).
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path
from types import ModuleType

import pytest

import gpuplace
import gpuplace.core
import gpuplace.sim

ROOT = Path(gpuplace.__file__).resolve().parents[2]
TOPS = (gpuplace.core, gpuplace.sim)  # deciding and evaluating: the same rule for both
SCANNED = tuple(top.__name__ for top in TOPS)
CORE = sorted(info.name for top in TOPS for info in pkgutil.walk_packages(top.__path__, f"{top.__name__}."))
PACKAGES = [top.__name__ for top in TOPS] + [
    name for name in CORE if hasattr(importlib.import_module(name), "__path__")]
MODULES = [name for name in CORE if name not in PACKAGES]


def _tree(module: ModuleType) -> ast.Module:
    return ast.parse(Path(module.__file__).read_text())


def _bound(tree: ast.Module, *, imports: bool) -> set[str]:
    """Public names the module's top level binds: definitions and assignments, and imports when asked."""
    names: set[str] = set()
    statements = list(tree.body)
    while statements:
        node = statements.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.If, ast.Try)) and not _type_checking(node):
            statements += node.body + node.orelse + getattr(node, "finalbody", [])
        elif imports and isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return {n for n in names if not n.startswith("_")}


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _submodules(package: ModuleType) -> set[str]:
    return {info.name for info in pkgutil.iter_modules(package.__path__)}


def test_the_walk_finds_the_whole_core():
    # the walk is what the rest stands on: if it missed packages, their modules would go unchecked
    assert {"gpuplace.core.policies.registry", "gpuplace.core.policies.gpuplace.policy",
            "gpuplace.core.defrag.planner", "gpuplace.core.latency.model", "gpuplace.sim.scenarios"} <= set(CORE)
    assert len(MODULES) >= 60


@pytest.mark.parametrize("name", PACKAGES + MODULES)
def test_all_exists_and_every_name_resolves(name):
    module = importlib.import_module(name)
    assert hasattr(module, "__all__"), f"{name} has no __all__"
    listed = list(module.__all__)
    assert len(listed) == len(set(listed)), f"{name}: __all__ repeats a name"
    assert not [n for n in listed if n.startswith("_")], f"{name}: private names in __all__"
    for public in listed:
        assert hasattr(module, public) or importlib.import_module(f"{name}.{public}"), f"{name}.{public}"


@pytest.mark.parametrize("name", PACKAGES)
def test_a_package_lists_every_module_and_only_what_it_binds(name):
    package = importlib.import_module(name)
    listed, modules = set(package.__all__), _submodules(package)
    assert modules <= listed, f"{name}: modules not in __all__: {sorted(modules - listed)}"
    extra = listed - modules - _bound(_tree(package), imports=True)
    assert not extra, f"{name}: __all__ names what the package does not bind: {sorted(extra)}"


@pytest.mark.parametrize("name", MODULES)
def test_a_module_lists_exactly_the_public_names_it_defines(name):
    module = importlib.import_module(name)
    listed, defined = set(getattr(module, "__all__", ())), _bound(_tree(module), imports=False)
    assert listed == defined, (f"{name}: defined but not in __all__: {sorted(defined - listed)}; "
                               f"in __all__ but not defined here: {sorted(listed - defined)}")


def _core_imports() -> list[tuple[str, str, str]]:
    """(importing file, module, name) for every `from gpuplace.core/sim... import name` in libs and services."""
    found = []
    for path in sorted([*(ROOT / "libs" / "gpuplace").rglob("*.py"), *(ROOT / "services").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(SCANNED):
                found += [(str(path.relative_to(ROOT)), node.module, a.name) for a in node.names]
    return found


def test_the_import_scan_reads_the_services_and_the_core():
    importers = {path for path, _, _ in _core_imports()}
    assert {"libs/gpuplace/core/policies/registry.py", "libs/gpuplace/usecases/decide.py",
            "libs/gpuplace/cli/sim.py"} <= importers


def test_whatever_other_modules_import_from_the_core_is_listed():
    missing = []
    for path, module_name, public in _core_imports():
        module = importlib.import_module(module_name)
        if public not in getattr(module, "__all__", ()):
            missing.append(f"{path}: {module_name}.{public}")
    assert not missing, "imported but not in __all__:\n" + "\n".join(missing)
