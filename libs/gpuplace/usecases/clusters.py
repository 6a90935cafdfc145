"""The clusters a placement worker holds: each one's ClusterState, its loading from the database, and its lock.

Everything that reads or changes a cluster's in-memory state (placement, the binder's outcomes, a plan's steps,
a scale hint's look at the view) does it inside `async with clusters.held(name) as state:`; no other object
holds, takes or hands on the lock itself. One hold is re-entered by the task that has it: a message published
inside it (messages.py) is handled in the same hold, so what ran under one acquisition of the lock before the
handlers were split out still does (a plan's abort and the retry of the waiting pods it freed room for).

A cluster is loaded by its first hold (or `load`): read from the database, then ClusterLoaded is published inside
that hold so its handlers resume what a previous process left (the defragmenter settles half-done plans first,
then placement binds reserved pods and queues waiting ones again: the order bootstrap subscribes them in).
A load that fails (the database away) leaves the cluster unloaded, and the next hold tries again. `reload`
marks every cluster for loading again when this worker's partitions changed (another worker may have placed
pods there meanwhile).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from gpuplace.usecases import latency_learning
from gpuplace.usecases.cluster_state import ClusterState
from gpuplace.usecases.cluster_view import ClusterView, core_pod
from gpuplace.usecases.messages import ClusterLoaded, MessageBus
from gpuplace.usecases.pod_states import HOLDING
from gpuplace.usecases.ports import NodeCapacity
from gpuplace.usecases.repositories import UnitOfWorkFactory


class Clusters:
    def __init__(self, uow_factory: UnitOfWorkFactory, bus: MessageBus) -> None:
        self._uow_factory = uow_factory
        self._bus = bus
        self._states: dict[str, ClusterState] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._holders: dict[str, asyncio.Task[object] | None] = {}  # the task holding each cluster's lock

    def loaded(self, cluster: str) -> ClusterState | None:
        """The cluster's state if it is loaded here, for a glance that takes no hold (which pods wait, whether
        a pod is recorded bound); None when this worker does not hold it."""
        state = self._states.get(cluster)
        return state if state is not None and state.loaded else None

    def state(self, cluster: str) -> ClusterState:
        """The cluster's state, loaded or not, for what is kept across loads (capacities, the pods plans hold)."""
        return self._state(cluster)

    def all_loaded(self) -> list[ClusterState]:
        return [state for state in self._states.values() if state.loaded]

    def known(self) -> set[str]:
        """Every cluster this worker has held, loaded or marked for loading again."""
        return set(self._states)

    @contextlib.asynccontextmanager
    async def held(self, cluster: str, *, load: bool = True) -> AsyncIterator[ClusterState]:
        """Hold `cluster`: its lock, loading it first unless `load` is False (a bind's outcome is recorded on
        the state it was bound from, loaded or not). Re-entered by the task that holds it already."""
        state = self._state(cluster)
        if self._holders.get(cluster) is asyncio.current_task():
            yield state
            return
        if load and not state.loaded:
            await self.load(cluster)
        async with self._hold(cluster):
            yield state

    async def load(self, cluster: str) -> None:
        """Read and resume `cluster` now if it is not loaded (module doc)."""
        state = self._state(cluster)
        if state.loaded:
            return
        async with self._hold(cluster):
            if not state.loaded:
                state.recorded_bound.clear()  # another worker may have held the cluster meanwhile
                await self.reread(state)
                await self._bus.publish(ClusterLoaded(cluster))
                state.loaded = True

    def reload(self) -> None:
        """This worker's partitions changed: every cluster is read and resumed again on its next hold."""
        for state in self._states.values():
            state.loaded = False

    async def reread(self, state: ClusterState) -> ClusterView:
        """Read the cluster's view again from the database (the caller holds it); returns the new view."""
        cluster = state.view.cluster
        state.stale = False  # what changes from here on marks it again
        async with self._uow_factory() as uow:
            nodes = await uow.nodes.load_nodes(cluster)
            gpus = await uow.nodes.load_gpus(cluster)
            allocations = await uow.allocations.load_allocations(cluster)
            holders = await uow.pods.pods_in_state(cluster, HOLDING)
            model = await latency_learning.load_model(uow)
        state.model_read_at = time.monotonic()
        state.view = ClusterView.hydrate(cluster, nodes, gpus, allocations, holders, model)
        state.capacities = {n["name"]: NodeCapacity(n["cpu_milli"], n["memory_mib"], n["gpu_count"],
                                                    n["gpu_memory_mib"]) for n in nodes}
        if not state.recent:  # after a restart: the pods running are the workload seen so far
            for row in holders:
                state.remember(row["uid"], core_pod(row))
        return state.view

    def _state(self, cluster: str) -> ClusterState:
        state = self._states.get(cluster)
        if state is None:
            state = self._states[cluster] = ClusterState(ClusterView(cluster, None))
            self._locks[cluster] = asyncio.Lock()
        return state

    @contextlib.asynccontextmanager
    async def _hold(self, cluster: str) -> AsyncIterator[None]:
        async with self._locks[cluster]:
            self._holders[cluster] = asyncio.current_task()
            try:
                yield
            finally:
                self._holders[cluster] = None


__all__ = ["Clusters"]
