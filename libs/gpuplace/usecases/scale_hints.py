"""Publish scale hints for a cluster whose pods wait: a `scale_hint` event on gpuplace.hints.v1, and metrics.

The hinter handles PodWaits (usecases/messages.py), published when a pod goes back to waiting. The hint is not
computed on every attempt: a cluster gets one check at a time, run once its oldest waiting pod has waited
`min_wait_s` and at least `interval_s` after the cluster's last check; the check computes core/scale_hints on a copy
of the cluster view (holding the cluster, Clusters.held, so the view does not change underneath) with the planner's
policy (its hypothetical placements feed no workload estimate) without the latency filter (it is bound to the GPUs
of the view, and a node not added yet carries no frames: the hint judges room), and writes the event to the outbox
only when the hint differs from the last one published for the cluster (ScaleHint.key: the counts by blocker, the
nodes per shape, the pods no shape hosts, the nodes to drain). The gauge
gpuplace_scale_hint_nodes{cluster,shape,blocked_by} follows every check.

Why its own topic rather than a `scale_hint` kind on gpuplace.placements.v1: a new kind is a breaking change for
v1 subscribers (contracts/__init__.py), and a hint is about a cluster, not one pod.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpuplace.contracts import topics
from gpuplace.contracts.events import DrainableNode, NodeAddition, ScaleHintEvent
from gpuplace.contracts.events import NodeShape as ShapeModel
from gpuplace.core import scale_hints
from gpuplace.core.defrag.model import Blocker, RunningPod
from gpuplace.core.framework.interface import Policy
from gpuplace.core.model import Pod
from gpuplace.usecases.cluster_view import ClusterView, core_pod
from gpuplace.usecases.clusters import Clusters
from gpuplace.usecases.messages import PodWaits
from gpuplace.usecases.pod_states import PLACED
from gpuplace.usecases.ports import NO_METRICS, Metrics, PodRow
from gpuplace.usecases.repositories import UnitOfWorkFactory

log = logging.getLogger(__name__)
MAX_NAMES = 50  # pod names an event lists, at most


@dataclass(frozen=True)
class HintSettings:
    min_wait_s: float = 30.0  # a pod must have waited this long before a hint is computed for it
    interval_s: float = 60.0  # at most one check per cluster this often
    shapes: tuple[scale_hints.NodeShape, ...] = ()  # operator-declared node shapes, beside the cluster's own
    max_drains: int = 5


PolicyFor = Callable[[ClusterView, Pod, Any], Policy]


class ScaleHinter:
    def __init__(self, uow_factory: UnitOfWorkFactory, clusters: Clusters, policy_for: PolicyFor, *, policy_name: str,
                 topic_suffix: str = "", settings: HintSettings | None = None, metrics: Metrics = NO_METRICS,
                 outbox_written: Callable[[], None] = lambda: None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._uow_factory = uow_factory
        self._clusters = clusters
        self._policy_for = policy_for
        self._policy_name = policy_name
        self._topic = topics.HINTS + topic_suffix
        self.settings = settings or HintSettings()
        self._metrics = metrics
        self._outbox_written = outbox_written
        self._clock = clock
        self._sleep = sleep
        self._last_check: dict[str, float] = {}
        self._published: dict[str, tuple[object, ...]] = {}
        self._pending: dict[str, asyncio.Task[None]] = {}
        self._since: dict[str, dict[str, float]] = {}  # cluster -> uid -> when first noted waiting

    async def on_pod_waits(self, message: PodWaits) -> None:
        self.note(message.row["cluster"], message.row["uid"])

    def note(self, cluster: str, uid: str) -> None:
        """Pod `uid` waits in `cluster`: make sure one check is scheduled (module doc). How long a pod has waited
        is counted from its first note, on this process's clock (not the database's)."""
        self._since.setdefault(cluster, {}).setdefault(uid, self._clock())
        task = self._pending.get(cluster)
        if task is not None and not task.done():
            return
        self._pending[cluster] = asyncio.get_running_loop().create_task(self._check_later(cluster))

    async def drain(self) -> None:
        tasks = [t for t in self._pending.values() if not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _check_later(self, cluster: str) -> None:
        try:
            state = self._clusters.loaded(cluster)  # None: the cluster is no longer held here
            if state is None or not state.waiting:
                return
            since = self._since.setdefault(cluster, {})
            for uid in set(since) - set(state.waiting):
                del since[uid]  # placed or gone
            waited = self._clock() - min(since.values(), default=self._clock())
            delay = max(self.settings.min_wait_s - waited,
                        self._last_check.get(cluster, -1e18) + self.settings.interval_s - self._clock(), 0.0)
            await self._sleep(delay)
            if self._clusters.loaded(cluster) is None:
                return
            await self.check(cluster)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("scale hint for cluster %s failed", cluster)

    async def check(self, cluster: str) -> ScaleHintEvent | None:
        """Compute the cluster's hint now and publish it if it changed; the event written, else None."""
        self._last_check[cluster] = self._clock()
        async with self._uow_factory() as uow:
            holders = await uow.pods.pods_in_state(cluster, PLACED)
        async with self._clusters.held(cluster, load=False) as state:
            view = state.view
            if view.snapshot is None:
                return None
            rows = sorted(state.waiting.values(), key=lambda r: (-r["priority"], r["deadline_ms"] or 1e18,
                                                                   str(r.get("first_seen_at"))))
            pods = [core_pod(r) for r in rows]
            if not pods:
                self._metrics.scale_hint(cluster, ())
                return None
            # Without the latency filter (no stream): it is bound to the view's GPUs, and nodes that do not
            # exist yet carry no frames; the hint judges room, and a new GPU starts empty.
            policy = self._policy_for(view, pods[0], None)
            shapes = scale_hints.shapes_of(view.snapshot, self.settings.shapes)
            hint = scale_hints.hints(view.snapshot, pods, shapes, policy, running=_running(view, holders),
                                     max_drains=self.settings.max_drains)
        self._metrics.scale_hint(cluster, [(a.shape.name, hint.blocked_by_of(a).value, a.nodes)
                                           for a in hint.additions])
        if self._published.get(cluster) == hint.key():
            return None
        event = _event(cluster, hint, rows, self._policy_name)
        async with self._uow_factory() as uow:
            await uow.outbox.add_outbox(self._topic, event.kafka_key().decode(), event.model_dump_json(by_alias=True))
            await uow.commit()
        self._outbox_written()
        self._published[cluster] = hint.key()
        log.info("scale hint for %s: %s", cluster, hint.reason or dict(event.blocked_by))
        return event


def _event(cluster: str, hint: scale_hints.ScaleHint, rows: Sequence[PodRow], policy: str) -> ScaleHintEvent:
    names = {r["name"]: f"{r['namespace']}/{r['name']}" for r in rows}
    blocked = hint.blocked()
    return ScaleHintEvent(
        cluster=cluster, waiting=len(rows), blocked_by={b.value: n for b, n in sorted(blocked.items(),
                                                                                       key=lambda x: x[0].value)},
        additions=tuple(NodeAddition(
            shape=ShapeModel(name=a.shape.name, gpu_model=a.shape.gpu_model, gpu_count=a.shape.gpu_count,
                             gpu_memory_mib=a.shape.gpu_memory_mib, cpu_milli=a.shape.cpu_milli,
                             memory_mib=a.shape.memory_mib),
            nodes=a.nodes, pods=len(a.pods), blocked_by=_addition_blocker(hint, a)) for a in hint.additions),
        unplaceable=tuple(names.get(p, p) for p in hint.unplaceable[:MAX_NAMES]),
        drainable=tuple(DrainableNode(node=d.node, moves=len(d.moves)) for d in hint.drains),
        reason=hint.reason[:2000], policy=policy)


def _addition_blocker(hint: scale_hints.ScaleHint, addition: scale_hints.NodeAddition) -> Any:
    blocker = hint.blocked_by_of(addition)
    return blocker.value if blocker in (Blocker.CAPACITY, Blocker.FRAGMENTATION, Blocker.LATENCY) else "capacity"


def _running(view: ClusterView, holders: Sequence[PodRow]) -> list[RunningPod]:
    """Every pod the view charges that the database knows as reserved or bound; others' pods are left out, so
    their nodes are never offered for draining (scale_hints._explained)."""
    by_uid = {r["uid"]: r for r in holders if r.get("managed", True)}
    return [RunningPod(uid=uid, pod=core_pod(by_uid[uid]), node_name=hold.node, gpu_indices=hold.gpu_indices,
                       share_milli=hold.share_milli, memory_mib=hold.gpu_memory_mib, owner=by_uid[uid]["owner"])
            for uid, hold in view.holds.items() if uid in by_uid]


def parse_shapes(text: str) -> tuple[scale_hints.NodeShape, ...]:
    """Operator-declared shapes, `MODEL:COUNT:GPU_MEMORY_MIB:CPU_MILLI:MEMORY_MIB` separated by commas, e.g.
    "NVIDIA-H200:8:143771:96000:786432". ValueError names the entry that is not one."""
    shapes = []
    for entry in filter(None, (e.strip() for e in text.split(","))):
        parts = entry.split(":")
        if len(parts) != 5:
            raise ValueError(f"node shape {entry!r}: expected MODEL:COUNT:GPU_MEMORY_MIB:CPU_MILLI:MEMORY_MIB")
        try:
            count, gpu_memory, cpu, memory = (int(p) for p in parts[1:])
        except ValueError:
            raise ValueError(f"node shape {entry!r}: COUNT, GPU_MEMORY_MIB, CPU_MILLI and MEMORY_MIB are "
                             "integers") from None
        shapes.append(scale_hints.NodeShape(parts[0], count, gpu_memory, cpu, memory))
    return tuple(shapes)


__all__ = ["HintSettings", "ScaleHinter", "parse_shapes"]
