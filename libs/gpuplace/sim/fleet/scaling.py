"""An autoscaler that acts on the fleet simulation: it adds the nodes the hint-driven autoscaler computes and
removes the nodes it added once they stay empty (issue 42, build item 4).

sim/fleet/autoscaling.py only asks what each autoscaler WOULD add; this one scales the fleet, as
cluster-autoscaler does with its scan interval, its provisioning delay and its scale-down-unneeded-time:
- every `interval_s` (default 5 min), for each cluster with pods waiting for `grace_s` or longer, the hint-driven
  autoscaler (sim/autoscaler.py: `hint_driven`, its existing logic) is given those pods (queue order) and the
  cluster with the nodes already being provisioned appended -- pods those nodes will host add nothing, as
  cluster-autoscaler counts upcoming nodes -- and the nodes it adds are requested. A node joins the cluster
  `provision_s` (default 5 min, a cloud VM's boot and join) after it was requested;
- with the latency filter on (the simulation's default), the autoscaler places pods with a frame rate behind the
  same filter (latency_view.py), so a perception pod waiting for GPU time gets a node, not a GPU that is full;
- its pod moves (making room for fragmentation-blocked pods) count only where the simulation moves pods, i.e.
  with defragmentation on; otherwise it is given nothing to move and pays for such pods with nodes;
- a node it added that holds no pod for `unneeded_s` (default 10 min) is removed. The nodes the plan gives the
  fleet are its floor and are never removed by the autoscaler;
- with `headroom` > 0 it also keeps room for that fraction of each perception deployment's replicas more
  (headroom.py): a reactive autoscaler cannot keep a wait shorter than its provisioning delay;
- at most `max_nodes_per_cluster` of its nodes live in one cluster at once (cluster-autoscaler's node-group
  maximum), a bound on a run that would otherwise grow without end.

What it cost (`totals`): nodes and GPUs requested, the most of its GPUs alive at once (requested, booting or
joined), the fleet's most GPUs, and GPU-hours of its nodes from request to removal (a cloud bills the boot).
"""

from __future__ import annotations

import time
import zlib
from collections import ChainMap
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from gpuplace.core.defrag.eligibility import HOUR_S
from gpuplace.core.defrag.model import Limits, PastMove
from gpuplace.core.framework.interface import Policy, PolicyContext
from gpuplace.core.latency.model import LatencyModel, Stream
from gpuplace.core.model import Node
from gpuplace.core.policies import registry
from gpuplace.core.scale_hints import NodeShape
from gpuplace.core.workload import TypicalWorkload
from gpuplace.sim import autoscaler
from gpuplace.sim.fleet import headroom
from gpuplace.sim.fleet.latency_view import ElasticLatency

if TYPE_CHECKING:
    from gpuplace.sim.fleet.cluster import Cluster
    from gpuplace.sim.fleet.plan import FleetPlan

NODE_PREFIX = "autoscaled"


class FleetSim(Protocol):
    """What the autoscaler reads of engine.FleetSim (which calls it: engine imports this module, not the reverse)."""

    plan: FleetPlan
    policy_name: str
    defrag: bool
    latency: bool
    limits: Limits
    truth: LatencyModel
    streams: dict[str, Stream]
    clusters: dict[str, Cluster]
    workloads: dict[str, TypicalWorkload]

    def evictions(self, cluster: str) -> tuple[PastMove, ...]: ...


@dataclass(frozen=True)
class Autoscale:
    """The acting autoscaler's settings (module docstring)."""

    interval_s: float = 300.0
    grace_s: float = 60.0
    provision_s: float = 300.0
    unneeded_s: float = 600.0
    max_nodes_per_cluster: int = 64
    headroom: float = 0.0

    def __post_init__(self) -> None:
        if min(self.grace_s, self.provision_s, self.unneeded_s, self.headroom) < 0 or self.interval_s <= 0:
            raise ValueError(f"autoscale needs a positive interval and non-negative delays: {self}")
        if self.max_nodes_per_cluster < 1:
            raise ValueError(f"max_nodes_per_cluster must be at least 1, got {self.max_nodes_per_cluster}")


@dataclass
class AddedNode:
    """One node the autoscaler requested: when, when it joined, when it was removed."""

    cluster: str
    node: Node
    shape: NodeShape
    requested_s: float
    joined_s: float | None = None
    removed_s: float | None = None
    empty_since_s: float | None = None

    @property
    def gpus(self) -> int:
        return self.shape.gpu_count

    def alive(self) -> bool:
        return self.removed_s is None


class FleetAutoscaler:
    """The acting autoscaler of the module docstring; FleetSim calls `tick` and `join`."""

    def __init__(self, config: Autoscale | None = None) -> None:
        self.config = config or Autoscale()
        self.nodes: list[AddedNode] = []
        self.ticks = 0
        self.runs = 0
        self.seconds = 0.0
        self.peak_gpus = 0
        self.peak_fleet_gpus = 0

    def tick(self, sim: FleetSim, now_s: float) -> list[AddedNode]:
        """Scale down what stayed empty, then scale up for what waits: the nodes requested now (they join at
        `now_s + provision_s`: the caller schedules `join`)."""
        started = time.perf_counter()
        self.ticks += 1
        requested: list[AddedNode] = []
        for name, cluster in sim.clusters.items():
            self._scale_down(sim, cluster, now_s)
            requested += self._scale_up(sim, name, cluster, now_s)
        self.nodes += requested
        self._peaks(sim)
        self.seconds += time.perf_counter() - started
        return requested

    def join(self, sim: FleetSim, added: AddedNode, now_s: float) -> None:
        """A requested node has booted: it joins its cluster (empty, so its unneeded time starts now)."""
        sim.clusters[added.cluster].add_node(added.node)
        added.joined_s = added.empty_since_s = now_s

    def _scale_down(self, sim: FleetSim, cluster: Cluster, now_s: float) -> None:
        used = {r.node for r in cluster.running.values()}
        for added in self._alive(cluster.name):
            if added.joined_s is None:
                continue
            if added.node.name in used:
                added.empty_since_s = None
            elif added.empty_since_s is None:
                added.empty_since_s = now_s
            elif now_s - added.empty_since_s >= self.config.unneeded_s and self._spare(sim, cluster, added, now_s):
                evicted = cluster.drain(added.node.name)
                assert not evicted, f"node {added.node.name} was empty"
                added.removed_s = now_s

    def _spare(self, sim: FleetSim, cluster: Cluster, added: AddedNode, now_s: float) -> bool:
        """Whether the headroom's placeholders fit without `added` (always, without headroom)."""
        spare, streams = headroom.placeholders(sim.plan, cluster.name, now_s, self.config.headroom)
        if not spare:
            return True
        snapshot = headroom.without(cluster.snapshot, added.node.name)
        run = autoscaler.hint_driven(snapshot, spare, self._factory(sim, cluster, now_s, streams), max_rounds=0)
        return not run.unplaced

    def _scale_up(self, sim: FleetSim, name: str, cluster: Cluster, now_s: float) -> list[AddedNode]:
        waiting = [w.pod for w in cluster.queue() if now_s - w.submitted_s >= self.config.grace_s]
        spare, streams = headroom.placeholders(sim.plan, name, now_s, self.config.headroom)
        waiting += spare
        room = self.config.max_nodes_per_cluster - len(self._alive(name))
        if not waiting or room <= 0:
            return []
        booting = [a.node for a in self._alive(name) if a.joined_s is None]
        snapshot = cluster.snapshot.appended(booting) if booting else cluster.snapshot.copy()
        movable = (autoscaler.Movable(tuple(p.running() for p in cluster.running.values()), sim.limits,
                                      sim.evictions(name), now_s) if sim.defrag else None)
        self.runs += 1
        run = autoscaler.hint_driven(snapshot, waiting, self._factory(sim, cluster, now_s, streams), movable=movable)
        shapes = [a.shape for hint in run.hints for a in hint.additions for _ in range(a.nodes)][:room]
        serial = len(self.nodes)
        return [AddedNode(name, shape.node(f"{NODE_PREFIX}-{name}-{serial + k}"), shape, now_s)
                for k, shape in enumerate(shapes)]

    def _factory(self, sim: FleetSim, cluster: Cluster, now_s: float,
                 spare: Mapping[str, Stream]) -> autoscaler.PolicyFactory:
        """Fresh policies as the cluster builds them, seeded for this cluster and tick, behind the latency filter
        when the simulation decides so (latency_view.py), which knows the streams of the placeholders `spare`."""
        seed = [sim.plan.seed, zlib.crc32(cluster.name.encode()), round(now_s)]
        context = PolicyContext(workload=sim.workloads[cluster.name], rng=np.random.default_rng(seed),
                                expected_shapes=sim.plan.expected_shapes)
        streams = ChainMap(dict(spare), sim.streams)

        def make() -> Policy:
            base = registry.create(sim.policy_name, context)
            return ElasticLatency(base, sim.truth, cluster.gpu_load, streams) if sim.latency else base

        return make

    def _alive(self, cluster: str) -> list[AddedNode]:
        return [a for a in self.nodes if a.cluster == cluster and a.alive()]

    def _peaks(self, sim: FleetSim) -> None:
        mine = sum(a.gpus for a in self.nodes if a.alive())
        booting = sum(a.gpus for a in self.nodes if a.alive() and a.joined_s is None)
        fleet = sum(int(c.snapshot.gpu_count.sum()) for c in sim.clusters.values()) + booting
        self.peak_gpus = max(self.peak_gpus, mine)
        self.peak_fleet_gpus = max(self.peak_fleet_gpus, fleet)

    def totals(self, end_s: float) -> dict[str, Any]:
        """What the autoscaler did and cost over a run that ended at `end_s` (module docstring)."""
        hours = sum(a.gpus * ((a.removed_s if a.removed_s is not None else end_s) - a.requested_s)
                    for a in self.nodes) / HOUR_S
        return {
            "interval_s": self.config.interval_s, "grace_s": self.config.grace_s,
            "provision_s": self.config.provision_s, "unneeded_s": self.config.unneeded_s,
            "nodes_added": len(self.nodes), "nodes_removed": sum(1 for a in self.nodes if not a.alive()),
            "gpus_added": sum(a.gpus for a in self.nodes), "peak_added_gpus": self.peak_gpus,
            "peak_fleet_gpus": self.peak_fleet_gpus, "added_gpu_hours": round(hours, 1),
            "by_shape": _by_shape(self.nodes), "ticks": self.ticks, "runs": self.runs,
            "seconds": round(self.seconds, 1),
        }


def _by_shape(nodes: list[AddedNode]) -> dict[str, int]:
    out: dict[str, int] = {}
    for a in nodes:
        out[a.shape.name] = out.get(a.shape.name, 0) + 1
    return dict(sorted(out.items()))


__all__ = ["AddedNode", "Autoscale", "FleetAutoscaler", "FleetSim", "NODE_PREFIX"]
