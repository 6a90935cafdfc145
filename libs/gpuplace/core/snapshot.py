"""ClusterSnapshot: the cluster as NumPy arrays, one row per node, so every filter and score touches
all nodes at once (kube-scheduler's NodeInfo snapshot, vectorised).

Rules of this module:
- the row order is the cluster's node order; "the first node" in a tie is the lowest row;
- GPU columns are padded to the widest node; a padded slot has `gpu_exists` False and zero free;
- only `charge` and `refund` change free capacity, and each bumps the node's `version` so caches
  keyed by node state (see node_states.py) know which rows to look at again;
- GPU types are (model, memory per GPU) pairs, interned in `gpu_types`; requests are resolved
  per type (see demand.py) because a memory request is a different share on each type;
- `facts` (labels, taints, cordon, readiness per row) is None for a bare cluster (the trace harness): then
  every node is open to every pod, and pod slots, host ports and countables are not limited;
- GPU topology (NUMA node and NVLink domain per GPU, `gpu_numa`, `gpu_nvlink`, -1 where not described) is
  fixed for a snapshot, like capacity; `gpu_domain` combines the two (see _domains and core/topology.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from gpuplace.core.arrays import BoolArray, IntArray
from gpuplace.core.model import MILLI_PER_GPU, Node
from gpuplace.core.node_rules import HostPort, NodeFacts, PodRules, StaticReasons, preference

_SNAPSHOT_IDS = itertools.count(1)
UNLIMITED_PODS = 1 << 40
"""Pod slots of a node that reports none (kube's allocatable `pods` absent): never the binding limit."""

_RuleArray = TypeVar("_RuleArray", BoolArray, IntArray)


@dataclass(frozen=True)
class GpuType:
    model: str
    memory_mib: int


class ClusterSnapshot:
    """Per-node arrays of capacity and free resources; see the module docstring for the rules."""

    def __init__(self, nodes: Sequence[Node], facts: Sequence[NodeFacts] | None = None) -> None:
        if not nodes:
            raise ValueError("a cluster needs at least one node")
        names = [n.name for n in nodes]
        if len(set(names)) != len(names):
            raise ValueError("node names must be unique")
        self.node_names: tuple[str, ...] = tuple(names)
        self._index = {name: i for i, name in enumerate(names)}
        n_nodes = len(nodes)
        max_gpus = max((len(n.gpus) for n in nodes), default=0)
        self.max_gpus = max_gpus
        types: dict[GpuType, int] = {}
        self.cpu_capacity_milli = np.array([n.cpu_milli for n in nodes], dtype=np.int64)  # (n_nodes,)
        self.memory_capacity_mib = np.array([n.memory_mib for n in nodes], dtype=np.int64)  # (n_nodes,)
        self.cpu_free_milli = np.array(
            [n.cpu_milli if n.cpu_free_milli is None else n.cpu_free_milli for n in nodes], dtype=np.int64
        )
        self.memory_free_mib = np.array(
            [n.memory_mib if n.memory_free_mib is None else n.memory_free_mib for n in nodes], dtype=np.int64
        )
        self.gpu_count = np.array([len(n.gpus) for n in nodes], dtype=np.int64)  # (n_nodes,)
        self.gpu_type_id = np.array(
            [types.setdefault(GpuType(n.gpu_model, n.gpu_memory_mib), len(types)) for n in nodes], dtype=np.int64
        )
        self.gpu_types: tuple[GpuType, ...] = tuple(types)
        self.gpu_memory_mib = np.array([n.gpu_memory_mib for n in nodes], dtype=np.int64)  # per GPU, (n_nodes,)
        self.gpu_exists = np.zeros((n_nodes, max_gpus), dtype=bool)  # (n_nodes, max_gpus)
        self.free_share_milli = np.zeros((n_nodes, max_gpus), dtype=np.int64)  # (n_nodes, max_gpus)
        self.free_memory_mib = np.zeros((n_nodes, max_gpus), dtype=np.int64)  # (n_nodes, max_gpus)
        self.gpu_numa = np.full((n_nodes, max_gpus), -1, dtype=np.int64)  # NUMA node per GPU, -1: not described
        self.gpu_nvlink = np.full((n_nodes, max_gpus), -1, dtype=np.int64)  # NVLink domain per GPU, likewise
        for row, node in enumerate(nodes):
            _check_gpus(node)
            for col, gpu in enumerate(node.gpus):
                self.gpu_exists[row, col] = True
                self.free_share_milli[row, col] = gpu.free_share_milli
                self.free_memory_mib[row, col] = gpu.free_memory
                self.gpu_numa[row, col] = -1 if gpu.numa_node is None else gpu.numa_node
                self.gpu_nvlink[row, col] = -1 if gpu.nvlink_domain is None else gpu.nvlink_domain
        self.has_topology, self.gpu_domain = _domains(self.gpu_numa, self.gpu_nvlink, self.gpu_count)
        self.any_topology = bool(self.has_topology.any())
        """False for a cluster no node of which describes its topology (the traces): topology costs nothing then."""
        self.observed_used_memory_mib = np.zeros((n_nodes, max_gpus), dtype=np.int64)  # telemetry
        self.gpu_pods_by_kind = np.zeros((n_nodes, max_gpus + 1), dtype=np.int64)  # see kind_of()
        self.version = np.zeros(n_nodes, dtype=np.int64)  # (n_nodes,)
        if facts is not None and [f.name for f in facts] != names:
            raise ValueError("facts must name the nodes in the snapshot's order")
        self.facts: tuple[NodeFacts, ...] | None = tuple(facts) if facts is not None else None
        self.pods_free = np.full(n_nodes, UNLIMITED_PODS, dtype=np.int64)  # pod slots left, (n_nodes,)
        self.host_ports_used: list[list[HostPort]] = [[] for _ in range(n_nodes)]  # per row
        self.extended_free: dict[str, IntArray] = {
            name: np.array([f.extended.get(name, 0) for f in facts or ()], dtype=np.int64)  # (n_nodes,)
            for name in sorted({k for f in facts or () for k in f.extended})
        }
        # see preference (int64): `what` in the key says which
        self._rule_arrays: dict[tuple[str, PodRules], npt.NDArray[Any] | None] = {}
        self._static_reasons: dict[PodRules, StaticReasons] = {}  # see static_reasons; facts never change
        self.uid = next(_SNAPSHOT_IDS)
        self._check_free()

    # -- reading -------------------------------------------------------------------------------

    @property
    def n_nodes(self) -> int:
        return len(self.node_names)

    def has_node(self, node_name: str) -> bool:
        return node_name in self._index

    def index_of(self, node_name: str) -> int:
        try:
            return self._index[node_name]
        except KeyError:
            raise KeyError(f"unknown node {node_name!r}") from None

    @property
    def total_gpus(self) -> int:
        return int(self.gpu_count.sum())

    @property
    def total_gpu_milli(self) -> int:
        return self.total_gpus * MILLI_PER_GPU

    @property
    def allocated_gpu_milli(self) -> int:
        return self.total_gpu_milli - int(self.free_share_milli.sum())

    def idle_gpu_milli(self) -> IntArray:
        """Free share summed over each node's GPUs, (n_nodes,)."""
        idle: IntArray = self.free_share_milli.sum(axis=1)
        return idle

    def static_mask(self, rules: PodRules) -> BoolArray | None:
        """Rows whose labels, taints and cordon allow `rules` (None: a bare cluster, all rows), (n_nodes,)."""
        reasons = self.static_reasons(rules)
        return None if reasons is None else reasons.allowed

    def static_reasons(self, rules: PodRules) -> StaticReasons | None:
        """Why each row's facts refuse `rules` (None: a bare cluster); computed once per distinct rules."""
        if self.facts is None:
            return None
        reasons = self._static_reasons.get(rules)
        if reasons is None:
            self._static_reasons[rules] = reasons = StaticReasons.of(self.facts, rules)
        return reasons

    def preference(self, rules: PodRules) -> IntArray | None:
        """Preferred-affinity weight per row (None: a bare cluster, or a pod that prefers nothing), (n_nodes,)."""
        if self.facts is None:
            return None
        return self._per_rules("preference", rules, preference)

    def _per_rules(self, what: str, rules: PodRules,
                   compute: Callable[[Sequence[NodeFacts], PodRules], _RuleArray | None]) -> _RuleArray | None:
        """Facts never change within a snapshot: each array is computed once per distinct rules and kept."""
        assert self.facts is not None
        key = (what, rules)
        if key not in self._rule_arrays:
            self._rule_arrays[key] = compute(self.facts, rules)
        return self._rule_arrays[key]

    # -- changing ------------------------------------------------------------------------------

    def charge(
        self, node: int, gpu_indices: Sequence[int], cpu_milli: int, memory_mib: int,
        share_milli: int, gpu_memory_mib: int, kind: int, rules: PodRules | None = None, *, slots: int = 1,
    ) -> None:
        """Take a pod's resources from `node`; every GPU in `gpu_indices` gives share and memory, and the pod
        takes `slots` pod slots (0 when charging a further part of a pod already counted), its host ports and
        its countables (`rules`).

        Refuses (ValueError) anything that would over-commit, leaving the snapshot unchanged.
        """
        cols = np.asarray(gpu_indices, dtype=np.int64)
        if len(set(cols.tolist())) != len(cols):
            raise ValueError(f"GPU indices repeat: {list(gpu_indices)}")
        if self.cpu_free_milli[node] < cpu_milli or self.memory_free_mib[node] < memory_mib:
            raise ValueError(f"node {self.node_names[node]}: CPU or memory would be over-committed")
        if len(cols):
            if not self.gpu_exists[node, cols].all():
                raise ValueError(f"node {self.node_names[node]} has no GPU among {cols.tolist()}")
            if (self.free_share_milli[node, cols] < share_milli).any() or (
                self.free_memory_mib[node, cols] < gpu_memory_mib
            ).any():
                raise ValueError(f"node {self.node_names[node]}: a GPU would be over-committed")
        self.cpu_free_milli[node] -= cpu_milli
        self.memory_free_mib[node] -= memory_mib
        self.free_share_milli[node, cols] -= share_milli
        self.free_memory_mib[node, cols] -= gpu_memory_mib
        if len(cols):
            self.gpu_pods_by_kind[node, kind] += 1
        self.take_slots(node, rules, slots)
        self.version[node] += 1

    def refund(
        self, node: int, gpu_indices: Sequence[int], cpu_milli: int, memory_mib: int,
        share_milli: int, gpu_memory_mib: int, kind: int, rules: PodRules | None = None, *, slots: int = 1,
    ) -> None:
        """Give back what `charge` took; refuses (ValueError) anything that would exceed capacity."""
        cols = np.asarray(gpu_indices, dtype=np.int64)
        if self.cpu_free_milli[node] + cpu_milli > self.cpu_capacity_milli[node] or (
            self.memory_free_mib[node] + memory_mib > self.memory_capacity_mib[node]
        ):
            raise ValueError(f"node {self.node_names[node]}: refund exceeds CPU or memory capacity")
        if len(cols) and (
            (self.free_share_milli[node, cols] + share_milli > MILLI_PER_GPU).any()
            or (self.free_memory_mib[node, cols] + gpu_memory_mib > self.gpu_memory_mib[node]).any()
        ):
            raise ValueError(f"node {self.node_names[node]}: refund exceeds GPU capacity")
        self.cpu_free_milli[node] += cpu_milli
        self.memory_free_mib[node] += memory_mib
        self.free_share_milli[node, cols] += share_milli
        self.free_memory_mib[node, cols] += gpu_memory_mib
        if len(cols):
            self.gpu_pods_by_kind[node, kind] -= 1
        self.take_slots(node, rules, -slots)
        self.version[node] += 1

    def take_slots(self, node: int, rules: PodRules | None, slots: int) -> None:
        """A pod's slots, host ports and countables: taken (slots > 0) or given back (< 0). These are what
        another scheduler may have over-committed, so they are counted, never refused; charge and refund call
        it, and so does whoever builds a snapshot from pods already running (CPU and memory come net)."""
        self.pods_free[node] -= slots
        sign = (slots > 0) - (slots < 0)
        if rules is None or sign == 0:
            return
        ports = self.host_ports_used[node]
        for port in rules.host_ports:
            if sign > 0:
                ports.append(port)
            elif port in ports:
                ports.remove(port)
        for name, amount in rules.extended:
            if name in self.extended_free:
                self.extended_free[name][node] -= sign * amount

    def copy(self) -> ClusterSnapshot:
        """An independent copy with its own uid (caches treat it as a new cluster)."""
        other = object.__new__(ClusterSnapshot)
        other.__dict__.update({k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in self.__dict__.items()})
        other.host_ports_used = [list(ports) for ports in self.host_ports_used]
        other.extended_free = {name: free.copy() for name, free in self.extended_free.items()}
        other.uid = next(_SNAPSHOT_IDS)
        return other

    def reordered(self, order: Sequence[int] | IntArray) -> ClusterSnapshot:
        """The same cluster with rows in `order` (a permutation): how the simulator sets node order."""
        perm = np.asarray(order, dtype=np.int64)
        if sorted(perm.tolist()) != list(range(self.n_nodes)):
            raise ValueError("order must be a permutation of the node rows")
        other = self.copy()
        for key, value in self.__dict__.items():
            if isinstance(value, np.ndarray) and value.shape[:1] == (self.n_nodes,):
                setattr(other, key, value[perm].copy())
        other.node_names = tuple(self.node_names[i] for i in perm)
        other._index = {name: i for i, name in enumerate(other.node_names)}
        other.facts = tuple(self.facts[i] for i in perm) if self.facts is not None else None
        other.host_ports_used = [list(self.host_ports_used[i]) for i in perm]
        other.extended_free = {name: free[perm].copy() for name, free in self.extended_free.items()}
        other._rule_arrays = {}
        other._static_reasons = {}
        return other

    def appended(self, nodes: Sequence[Node], facts: Sequence[NodeFacts] | None = None) -> ClusterSnapshot:
        """This cluster with `nodes` added as new rows after the existing ones (what an autoscaler would add):
        every per-row array is extended, GPU columns padded to the widest node, GPU types merged. `facts` are
        required exactly when this snapshot has facts. A new snapshot (new uid); this one is unchanged."""
        if not nodes:
            return self.copy()
        if (facts is None) != (self.facts is None):
            raise ValueError("facts for added nodes are needed exactly when the snapshot has facts")
        clash = sorted({n.name for n in nodes} & set(self.node_names))
        if clash:
            raise ValueError(f"nodes already in the cluster: {clash}")
        extra = ClusterSnapshot(nodes, facts)
        other = self.copy()
        width = max(self.max_gpus, extra.max_gpus)
        types = {t: i for i, t in enumerate(self.gpu_types)}
        for t in extra.gpu_types:
            types.setdefault(t, len(types))
        remap = np.array([types[t] for t in extra.gpu_types], dtype=np.int64)
        for key, value in self.__dict__.items():
            if not isinstance(value, np.ndarray) or value.shape[:1] != (self.n_nodes,):
                continue
            added = getattr(extra, key)
            if key == "gpu_type_id":
                added = remap[added]
            if value.ndim == 2:  # GPU columns (max_gpus, or max_gpus + 1 for gpu_pods_by_kind): pad both
                grow = width - self.max_gpus
                value = np.pad(value, ((0, 0), (0, grow)))
                added = np.pad(added, ((0, 0), (0, value.shape[1] - added.shape[1])))
            setattr(other, key, np.concatenate([value, added]))
        other.max_gpus = width
        other.gpu_types = tuple(types)
        other.node_names = self.node_names + extra.node_names
        other._index = {name: i for i, name in enumerate(other.node_names)}
        other.facts = (*self.facts, *extra.facts) if self.facts is not None and extra.facts is not None else None
        other.host_ports_used = [*other.host_ports_used, *extra.host_ports_used]
        names = sorted(set(self.extended_free) | set(extra.extended_free))
        other.extended_free = {
            name: np.concatenate([self.extended_free.get(name, np.zeros(self.n_nodes, dtype=np.int64)),
                                  extra.extended_free.get(name, np.zeros(extra.n_nodes, dtype=np.int64))])
            for name in names}
        other._rule_arrays = {}  # per-rules caches of the facts: the added rows make them stale
        other._static_reasons = {}
        return other

    def _check_free(self) -> None:
        if (self.cpu_free_milli > self.cpu_capacity_milli).any() or (self.cpu_free_milli < 0).any():
            raise ValueError("free CPU out of [0, capacity]")
        if (self.memory_free_mib > self.memory_capacity_mib).any() or (self.memory_free_mib < 0).any():
            raise ValueError("free memory out of [0, capacity]")


class MaskedViews:
    """Copies of one snapshot with some GPUs shown full (`view`), one per decision, that caches follow as they
    follow the snapshot itself: every view shares one uid, and a row's `version` moves only when the snapshot's
    row or the mask on it changed since the previous view. A per-state cache (core/state_ids.py) then re-keys the
    few rows that changed instead of every node of a snapshot it has never seen."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.uid = next(_SNAPSHOT_IDS)
        self._base_version = snapshot.version.copy()
        self._masked = np.zeros(snapshot.gpu_exists.shape, dtype=bool)
        self._version = snapshot.version.copy()

    def view(self, snapshot: ClusterSnapshot, masked: BoolArray) -> ClusterSnapshot:
        """`snapshot` (the one these views were made for) with no free share or memory on the `masked` GPUs."""
        changed = (snapshot.version != self._base_version) | (masked != self._masked).any(axis=1)
        self._version[changed] += 1
        self._base_version[changed] = snapshot.version[changed]
        self._masked = masked
        view = snapshot.copy()
        view.free_share_milli[masked] = 0
        view.free_memory_mib[masked] = 0
        view.uid = self.uid
        view.version = self._version.copy()
        return view


def kind_of(gpu_count: int, share_milli: int) -> int:
    """The request type GpuClustering groups by: 0 for a shared GPU, k for k GPUs."""
    return 0 if gpu_count == 1 and share_milli < MILLI_PER_GPU else gpu_count


def _domains(numa: IntArray, nvlink: IntArray, gpu_count: IntArray) -> tuple[BoolArray, IntArray]:
    """Which rows describe their topology, (n_nodes,), and each GPU's domain, (n_nodes, max_gpus).

    A domain is the GPUs that share both a NUMA node and an NVLink domain (core/topology.py says why); a level
    the node does not describe counts as one domain. The id packs the two numbers into one int64, comparable
    within a row only; -1 on padded slots and on rows without topology."""
    described = (numa >= 0) | (nvlink >= 0)  # (n_nodes, max_gpus)
    has_topology: BoolArray = np.asarray(described.any(axis=1), dtype=bool)
    real = np.arange(numa.shape[1])[None, :] < gpu_count[:, None]
    packed = (np.maximum(numa, 0) << 32) | np.maximum(nvlink, 0)
    domain: IntArray = np.where(real & has_topology[:, None], packed, -1)
    return has_topology, domain


def _check_gpus(node: Node) -> None:
    for what in ("numa_node", "nvlink_domain"):
        described = [getattr(g, what) is not None for g in node.gpus]
        if any(described) and not all(described):
            raise ValueError(f"node {node.name}: {what} given for some GPUs only; describe all or none")
    models = {g.model for g in node.gpus}
    if len(models) > 1:
        raise ValueError(f"node {node.name}: mixed GPU models {sorted(models)} are not supported")
    if [g.index for g in node.gpus] != list(range(len(node.gpus))):
        raise ValueError(f"node {node.name}: GPU indices must be 0..{len(node.gpus) - 1} in order")
    if len({g.memory_mib for g in node.gpus}) > 1:
        raise ValueError(f"node {node.name}: GPUs of one model must have one memory size")


def domain_room(snapshot: ClusterSnapshot, gpus: BoolArray, rows: slice | IntArray) -> IntArray:
    """The most of `gpus` (n_rows, max_gpus) that lie in one domain of each row, (n_rows,); on a row without
    topology, all of them (one domain)."""
    domain = snapshot.gpu_domain[rows]  # (n_rows, max_gpus)
    same = domain[:, :, None] == domain[:, None, :]  # (n_rows, max_gpus, max_gpus)
    per_gpu = (same & gpus[:, None, :]).sum(axis=2)  # of `gpus`, how many share each GPU's domain
    room: IntArray = np.where(gpus, per_gpu, 0).max(axis=1, initial=0)
    return room


__all__ = ["ClusterSnapshot", "GpuType", "MaskedViews", "UNLIMITED_PODS", "domain_room", "kind_of"]
