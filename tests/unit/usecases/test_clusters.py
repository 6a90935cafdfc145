"""usecases/clusters and usecases/messages: one hold of a cluster at a time, re-entered by the task holding it (so a
message handled inside a hold runs in it); a load resumes the cluster in its handlers' order and is tried again when
it fails; and the shape issue 36 asks of the use cases: no lock outside Clusters, no class over 20 methods or
300 lines."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from gpuplace.usecases.clusters import Clusters
from gpuplace.usecases.ingest import ingest_node
from gpuplace.usecases.messages import ClusterLoaded, MessageBus, PlanSettled
from tests.builders import node_event
from tests.fakes import FakeUnitOfWorkFactory

USECASES = Path(__file__).parents[3] / "libs" / "gpuplace" / "usecases"

async def test_a_hold_is_re_entered_by_its_task_and_waited_for_by_another(uow_factory: FakeUnitOfWorkFactory):
    clusters = Clusters(uow_factory, MessageBus())
    order: list[str] = []

    async def other() -> None:
        async with clusters.held("east"):
            order.append("other")

    async with clusters.held("east") as state:
        task = asyncio.create_task(other())
        async with clusters.held("east") as again:  # the same task: re-entered, not a deadlock
            assert again is state
            await asyncio.sleep(0.01)
            order.append("inner")
        await asyncio.sleep(0.01)
        order.append("outer")
    await task
    assert order == ["inner", "outer", "other"]


async def test_a_load_publishes_cluster_loaded_inside_its_hold_and_handlers_run_in_subscription_order(
        uow_factory: FakeUnitOfWorkFactory):
    bus = MessageBus()
    clusters = Clusters(uow_factory, bus)
    seen: list[tuple[str, bool]] = []

    def handler(name: str):
        async def handle(message: ClusterLoaded) -> None:
            async with clusters.held(message.cluster) as state:  # the loader's hold, re-entered
                seen.append((name, state.loaded))
        return handle

    bus.subscribe(ClusterLoaded, handler("first"))
    bus.subscribe(ClusterLoaded, handler("second"))
    bus.subscribe(PlanSettled, handler("never"))  # another message's handler is not called
    await clusters.load("east")
    await clusters.load("east")  # loaded already: nothing published again
    assert seen == [("first", False), ("second", False)]  # before the cluster counts as loaded
    assert clusters.loaded("east") is not None


async def test_a_load_that_fails_leaves_the_cluster_unloaded_and_the_next_hold_loads_it(
        uow_factory: FakeUnitOfWorkFactory):
    bus = MessageBus()
    clusters = Clusters(uow_factory, bus)
    failures = [RuntimeError("database away")]

    async def flaky(message: ClusterLoaded) -> None:
        if failures:
            raise failures.pop()

    bus.subscribe(ClusterLoaded, flaky)
    with pytest.raises(RuntimeError, match="database away"):
        async with clusters.held("east"):
            pass
    assert clusters.loaded("east") is None
    async with clusters.held("east") as state:
        assert state.loaded


async def test_a_reread_brings_the_nodes_the_database_has(uow_factory: FakeUnitOfWorkFactory):
    clusters = Clusters(uow_factory, MessageBus())
    async with clusters.held("east") as state:
        assert not state.view.has_node("n1")
        await ingest_node(uow_factory, node_event("n1"), consumer="test")
        view = await clusters.reread(state)
        assert view.has_node("n1") and state.view is view and state.capacities["n1"].gpu_count == 2


def _modules() -> list[tuple[str, ast.Module]]:
    return [(p.name, ast.parse(p.read_text())) for p in sorted(USECASES.glob("*.py"))]


def test_no_use_case_but_clusters_touches_a_lock():
    """Issue 36: no object takes or returns another object's lock; only Clusters has one (Clusters.held)."""
    found = []
    for name, tree in _modules():
        for node in ast.walk(tree):
            if name != "clusters.py" and isinstance(node, ast.Attribute) and node.attr in ("lock", "Lock"):
                found.append(f"{name}:{node.lineno}")
    assert found == []


def test_no_use_case_class_has_over_20_methods_or_300_lines():
    over = {}
    for name, tree in _modules():
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                methods = sum(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in node.body)
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if methods > 20 or lines > 300:
                    over[f"{name}:{node.name}"] = (methods, lines)
    assert over == {}
