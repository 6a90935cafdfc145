"""Occupancy: who runs where, as arrays the planner screens all at once (like GpuLoad beside the snapshot).

One slot per running pod: its node row in the snapshot's order, the GPUs it holds (a bool row), its
share and memory per GPU, CPU and host memory, priority, deadline slack, move cost, and the id of
its request (equal requests share one id; `requests` holds each id's per-GPU-type demand, so "where
could these pods go?" is asked once per request, not once per pod -- see landing.py). The planner
builds one from a sequence of RunningPods (`Occupancy.of`), or a caller that places many pods (the
simulator) keeps one up to date with `add` and `remove` so each plan starts without a rebuild.
A pod on a node the snapshot does not know is kept but never offered as a mover (nothing to free).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from gpuplace.core.arrays import IntArray
from gpuplace.core.defrag.cost import move_cost_s
from gpuplace.core.defrag.model import RunningPod, slack_ms
from gpuplace.core.demand import Demand, resolve
from gpuplace.core.model import GpuRequest
from gpuplace.core.snapshot import ClusterSnapshot

_INITIAL_SLOTS = 1024


class Occupancy:
    """Running pods by slot; see the module docstring. Arrays are (capacity,) or (capacity, max_gpus)."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.node_names = snapshot.node_names
        self.gpu_types = snapshot.gpu_types
        self._snapshot = snapshot
        self.requests: list[Demand] = []
        self._request_ids: dict[tuple[int, int, GpuRequest], int] = {}
        n_types = len(snapshot.gpu_types)
        self.request_count = np.zeros(0, dtype=np.int64)  # GPUs per request (0: none), (n_requests,)
        self.request_share_milli = np.zeros((0, n_types), dtype=np.int64)  # (n_requests, n_types)
        self.request_memory_mib = np.zeros((0, n_types), dtype=np.int64)  # (n_requests, n_types)
        self._rows = {name: row for row, name in enumerate(snapshot.node_names)}
        self.max_gpus = snapshot.max_gpus
        self.pods: list[RunningPod | None] = []
        self._slots: dict[str, int] = {}
        self._vacant: list[int] = []
        self.node = np.full(_INITIAL_SLOTS, -1, dtype=np.int64)  # row, -1: vacant or unknown node
        self.gpus = np.zeros((_INITIAL_SLOTS, self.max_gpus), dtype=bool)  # (capacity, max_gpus)
        self.share_milli = np.zeros(_INITIAL_SLOTS, dtype=np.int64)  # per GPU
        self.memory_mib = np.zeros(_INITIAL_SLOTS, dtype=np.int64)  # GPU memory per GPU
        self.cpu_milli = np.zeros(_INITIAL_SLOTS, dtype=np.int64)
        self.host_memory_mib = np.zeros(_INITIAL_SLOTS, dtype=np.int64)
        self.priority = np.zeros(_INITIAL_SLOTS, dtype=np.int64)
        self.slack_ms = np.zeros(_INITIAL_SLOTS, dtype=np.float64)
        self.cost_s = np.zeros(_INITIAL_SLOTS, dtype=np.float64)
        self.request_id = np.zeros(_INITIAL_SLOTS, dtype=np.int64)

    @classmethod
    def of(cls, snapshot: ClusterSnapshot, running: Iterable[RunningPod]) -> Occupancy:
        occupancy = cls(snapshot)
        for pod in running:
            occupancy.add(pod)
        return occupancy

    def __len__(self) -> int:
        return len(self._slots)

    def __iter__(self) -> Iterator[RunningPod]:
        return (pod for pod in self.pods if pod is not None)

    def slot_of(self, uid: str) -> int | None:
        return self._slots.get(uid)

    def in_slot(self, slot: int) -> RunningPod:
        """The pod in an occupied slot (one read off this occupancy's arrays, so never vacant)."""
        running = self.pods[slot]
        assert running is not None, f"slot {slot} is vacant"
        return running

    def pod(self, uid: str) -> RunningPod:
        """The recorded pod `uid` (KeyError if unknown)."""
        return self.in_slot(self._slots[uid])

    def moved_milli(self, slots: IntArray | list[int]) -> IntArray:
        """GPU share each pod holds over all its GPUs: what moving it displaces."""
        index = np.asarray(slots, dtype=np.int64)
        moved: IntArray = self.share_milli[index] * self.gpus[index].sum(axis=1)
        return moved

    def add(self, running: RunningPod) -> None:
        """Record a running pod (ValueError if its uid is already recorded)."""
        if running.uid in self._slots:
            raise ValueError(f"pod {running.uid} is already recorded")
        slot = self._vacant.pop() if self._vacant else self._new_slot()
        self._slots[running.uid] = slot
        self.pods[slot] = running
        row = self._rows.get(running.node_name, -1)
        known = row >= 0 and all(0 <= g < self.max_gpus for g in running.gpu_indices)
        self.node[slot] = row if known else -1
        self.gpus[slot] = False
        if known:
            self.gpus[slot, list(running.gpu_indices)] = True
        self.share_milli[slot] = running.share_milli
        self.memory_mib[slot] = running.memory_mib
        self.cpu_milli[slot] = running.pod.cpu_milli
        self.host_memory_mib[slot] = running.pod.memory_mib
        self.priority[slot] = running.pod.priority
        self.slack_ms[slot] = slack_ms(running.pod)
        self.cost_s[slot] = move_cost_s(running)
        self.request_id[slot] = self._request_id(running)

    def remove(self, uid: str) -> RunningPod:
        """Forget a pod (KeyError if unknown) and return its record."""
        slot = self._slots.pop(uid)
        running = self.pods[slot]
        assert running is not None
        self.pods[slot] = None
        self.node[slot] = -1
        self.gpus[slot] = False
        self._vacant.append(slot)
        return running

    def _request_id(self, running: RunningPod) -> int:
        pod = running.pod
        key = (pod.cpu_milli, pod.memory_mib, pod.gpu)
        found = self._request_ids.get(key)
        if found is None:
            found = self._request_ids[key] = len(self.requests)
            demand = resolve(pod, self._snapshot)
            self.requests.append(demand)
            self.request_count = np.append(self.request_count, demand.gpu_count if demand.needs_gpu else 0)
            self.request_share_milli = np.vstack([self.request_share_milli, demand.share_milli_by_type])
            self.request_memory_mib = np.vstack([self.request_memory_mib, demand.gpu_memory_mib_by_type])
        return found

    def _new_slot(self) -> int:
        slot = len(self.pods)
        self.pods.append(None)
        if slot >= len(self.node):
            size = 2 * len(self.node)
            for name in ("node", "gpus", "share_milli", "memory_mib", "cpu_milli", "host_memory_mib", "priority",
                         "slack_ms", "cost_s", "request_id"):
                old = getattr(self, name)
                new = np.full((size, *old.shape[1:]), -1 if name == "node" else 0, dtype=old.dtype)
                new[: len(old)] = old
                setattr(self, name, new)
        return slot


__all__ = ["Occupancy"]
