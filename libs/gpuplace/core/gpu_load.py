"""GpuLoad: the streams running on every GPU, kept beside the ClusterSnapshot for latency checks.

The snapshot knows each GPU's free share and memory, not who runs there; latency admission
(filters/latency_fit.py) needs each co-runner's frame rate, service time, class and deadline.
GpuLoad keeps them as padded (n_nodes, max_gpus, n_slots) arrays in the snapshot's row order, so a
check covers every GPU at once, and derives work and load from whichever LatencyModel is current
(an online refit changes every GPU's load without touching this state).

Rules of this module:
- it is charged and refunded alongside the snapshot (a pod is charged once; charging it again on the
  same GPUs is a no-op, elsewhere an error; refunding a pod never charged is a no-op);
- a pod on k GPUs is a co-runner on each of them;
- every change bumps `version`, and `node_version` of the node it touched, so caches know when to look again
  and which rows to look at (filters/latency_fit.py keeps each GPU's resident terms and refreshes changed rows).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TypeVar

import numpy as np

from gpuplace.core.arrays import BoolArray, FloatArray, IntArray
from gpuplace.core.latency.model import LatencyModel, Stream
from gpuplace.core.latency.speed import relative_speed
from gpuplace.core.snapshot import ClusterSnapshot

_INITIAL_SLOTS = 8
_Slots = TypeVar("_Slots", IntArray, FloatArray)
Rows = IntArray | slice
_ALL = slice(None)


class GpuLoad:
    """Per node x GPU x slot arrays of the streams placed there; see the module docstring."""

    def __init__(self, speed: Sequence[float], max_gpus: int) -> None:
        self.speed = np.asarray(speed, dtype=np.float64)  # relative speed of each node's GPUs, (n_nodes,)
        if self.speed.ndim != 1 or not (self.speed > 0).all():
            raise ValueError("speed must be a positive vector, one per node")
        shape = (len(self.speed), max_gpus, _INITIAL_SLOTS)
        self.frame_rate_hz = np.zeros(shape)  # 0 in an empty slot, (n_nodes, max_gpus, n_slots)
        self.service_ms = np.full(shape, np.nan)  # reference GPU; NaN: the class's, (n_nodes, max_gpus, n_slots)
        self.deadline_ms = np.full(shape, np.inf)  # inf: no deadline, (n_nodes, max_gpus, n_slots)
        self.class_id = np.full(shape, -1, dtype=np.int64)  # index into `classes`; -1 none
        self.classes: list[str] = []
        self._placed: dict[str, tuple[int, tuple[tuple[int, int], ...]]] = {}  # pod -> (node, ((gpu, slot), ...))
        self.version = 0
        self.node_version = np.zeros(len(self.speed), dtype=np.int64)  # (n_nodes,): bumped with the node's slots
        self._frozen = False
        self._taken: list[weakref.ref[AsTaken]] = []  # readers of the slots as they are now (taken())

    @classmethod
    def for_snapshot(cls, snapshot: ClusterSnapshot) -> GpuLoad:
        """An empty GpuLoad whose speeds come from the snapshot's GPU products (latency/speed.py)."""
        speeds = [relative_speed(snapshot.gpu_types[t].model) for t in snapshot.gpu_type_id]
        return cls(speeds, snapshot.max_gpus)

    def frozen_copy(self) -> GpuLoad:
        """The slots as they are now, in a copy that refuses changes."""
        other = object.__new__(GpuLoad)
        other.__dict__.update({k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in self.__dict__.items()})
        other.classes = list(self.classes)
        other._placed = {}
        other._frozen = True
        other._taken = []
        return other

    def taken(self) -> AsTaken:
        """The slots as they are now, for a reader that may come after the next change: what a check explains
        later reads (a verdict's reasons are built when first read, possibly after the next pod was charged).
        Copied on write: the copy is made only if a change comes while the reader lives, so a check that is never
        explained (nearly every one: a decision pays it on every GPU of the cluster) copies nothing."""
        reader = AsTaken(self)
        if len(self._taken) >= 64:
            self._taken = [ref for ref in self._taken if ref() is not None]
        self._taken.append(weakref.ref(reader))
        return reader

    # -- reading (`rows`: the node rows to read, all by default) ----------------------------------

    @property
    def occupied(self) -> BoolArray:
        return self.frame_rate_hz > 0  # (n_nodes, max_gpus, n_slots)

    def pods(self) -> tuple[str, ...]:
        return tuple(self._placed)

    def period_ms(self, rows: Rows = _ALL) -> FloatArray:
        """Frame period of each slot, inf when empty, (n_nodes, max_gpus, n_slots)."""
        rate = self.frame_rate_hz[rows]
        occupied = rate > 0
        with np.errstate(divide="ignore"):
            return np.where(occupied, 1000.0 / np.where(occupied, rate, 1.0), np.inf)

    def reference_service_ms(self, model: LatencyModel, rows: Rows = _ALL) -> FloatArray:
        """Each slot's service time on the reference GPU, resolved as model.service_ms does."""
        own = self.service_ms[rows]
        by_class = np.array([model.classes[c].service_ms if c in model.classes else np.nan for c in self.classes]
                            + [np.nan])  # last entry serves class_id -1
        from_class = by_class[self.class_id[rows]]
        prior = model.prior_service_share * self.period_ms(rows)
        resolved = np.where(np.isnan(own), np.where(np.isnan(from_class), prior, from_class), own)
        return np.where(self.frame_rate_hz[rows] > 0, resolved, 0.0)

    def work_fraction(self, model: LatencyModel, rows: Rows = _ALL) -> FloatArray:
        fractions = np.array([model.work_fraction(c) for c in self.classes] + [model.prior_work_fraction])
        return np.where(self.frame_rate_hz[rows] > 0, fractions[self.class_id[rows]], 0.0)

    def service_gpu_ms(self, model: LatencyModel, rows: Rows = _ALL) -> FloatArray:
        """Service time of each slot on its own GPU, (n_nodes, max_gpus, n_slots)."""
        return self.reference_service_ms(model, rows) / self.speed[rows][:, None, None]

    def work_gpu_ms(self, model: LatencyModel, rows: Rows = _ALL) -> FloatArray:
        """GPU work per frame of each slot on its own GPU, (n_nodes, max_gpus, n_slots)."""
        return self.work_fraction(model, rows) * self.service_gpu_ms(model, rows)

    def load_fraction(self, model: LatencyModel) -> FloatArray:
        """Sum over each GPU's streams of frame rate x GPU work per frame, (n_nodes, max_gpus)."""
        load: FloatArray = (self.work_gpu_ms(model) * self.frame_rate_hz / 1000.0).sum(axis=2)
        return load

    def min_deadline_ms(self) -> FloatArray:
        """Tightest deadline on each GPU, inf where none, (n_nodes, max_gpus)."""
        tightest: FloatArray = self.deadline_ms.min(axis=2)
        return tightest

    def streams_on(self, node: int, gpu: int) -> list[tuple[str, Stream]]:
        """(pod name, stream) of every pod on one GPU, in slot order."""
        out = []
        for pod, (row, places) in self._placed.items():
            for g, slot in places:
                if row == node and g == gpu:
                    out.append((slot, pod, self._stream(node, gpu, slot)))
        return [(pod, stream) for _, pod, stream in sorted(out)]

    # -- changing ------------------------------------------------------------------------------

    def charge(self, pod_name: str, node: int, gpu_indices: Sequence[int], stream: Stream) -> None:
        self._check_mutable()
        gpus = tuple(int(g) for g in gpu_indices)
        if pod_name in self._placed:
            row, places = self._placed[pod_name]
            if row == node and tuple(g for g, _ in places) == gpus:
                return
            raise ValueError(f"pod {pod_name} is already charged on node row {row}")
        places = tuple((g, self._free_slot(node, g)) for g in gpus)
        cid = self._class_id(stream.workload_class)
        for g, slot in places:
            self.frame_rate_hz[node, g, slot] = stream.frame_rate_hz
            self.service_ms[node, g, slot] = np.nan if stream.service_ms is None else stream.service_ms
            self.deadline_ms[node, g, slot] = np.inf if stream.deadline_ms is None else stream.deadline_ms
            self.class_id[node, g, slot] = cid
        self._placed[pod_name] = (node, places)
        self._changed(node)

    def refund(self, pod_name: str) -> None:
        self._check_mutable()
        placed = self._placed.pop(pod_name, None)
        if placed is None:
            return
        node, places = placed
        for g, slot in places:
            self.frame_rate_hz[node, g, slot] = 0.0
            self.service_ms[node, g, slot] = np.nan
            self.deadline_ms[node, g, slot] = np.inf
            self.class_id[node, g, slot] = -1
        self._changed(node)

    def _changed(self, node: int) -> None:
        self.version += 1
        self.node_version[node] += 1

    def _check_mutable(self) -> None:
        """Called before every change: refuses one on a frozen copy, and gives the readers of the slots as they
        were (taken()) their copy first."""
        if self._frozen:
            raise ValueError("a frozen copy of a GpuLoad cannot change")
        readers = [reader for ref in self._taken if (reader := ref()) is not None]
        self._taken = []
        if readers:
            copy = self.frozen_copy()
            for reader in readers:
                reader.load = copy

    def _stream(self, node: int, gpu: int, slot: int) -> Stream:
        service, deadline, cid = (self.service_ms[node, gpu, slot], self.deadline_ms[node, gpu, slot],
                                  int(self.class_id[node, gpu, slot]))
        return Stream(float(self.frame_rate_hz[node, gpu, slot]), self.classes[cid] if cid >= 0 else None,
                      None if np.isnan(service) else float(service), None if np.isinf(deadline) else float(deadline))

    def _class_id(self, name: str | None) -> int:
        if name is None:
            return -1
        if name not in self.classes:
            self.classes.append(name)
        return self.classes.index(name)

    def _free_slot(self, node: int, gpu: int) -> int:
        free = np.flatnonzero(~self.occupied[node, gpu])
        if len(free):
            return int(free[0])
        slots = self.frame_rate_hz.shape[2]
        grow = slots  # double the slot axis
        self.frame_rate_hz = _pad(self.frame_rate_hz, grow, 0.0)
        self.service_ms = _pad(self.service_ms, grow, np.nan)
        self.deadline_ms = _pad(self.deadline_ms, grow, np.inf)
        self.class_id = _pad(self.class_id, grow, -1)
        return slots


class AsTaken:
    """A GpuLoad's slots as they were when taken (GpuLoad.taken): `load` is the live GpuLoad until its next
    change, and a frozen copy of it from then on."""

    __slots__ = ("load", "__weakref__")

    def __init__(self, load: GpuLoad) -> None:
        self.load = load


def _pad(array: _Slots, extra: int, fill: float) -> _Slots:
    pad = np.full((*array.shape[:2], extra), fill, dtype=array.dtype)
    return np.concatenate([array, pad], axis=2)


__all__ = ["AsTaken", "GpuLoad", "Rows"]
