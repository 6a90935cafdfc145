"""Faults of `gpuplace bench chaos` that test whether placement holds to the apiserver's truth (issue 40).

Pods are the truth, nodes and the event stream are not. Four faults, drawn in a seeded order over the later part
of the faults phase (when pods run), one at a time:
- `node-recreate`: the node with the most of the run's pods on it is deleted and registered again under the same
  name, its pods never deleted (as an autoscaler, a repair or a kubelet re-registration does): it must come back
  charged with them;
- `forged-bound`: a `bound` event for a live pod, naming a node it is not bound to (anyone who reaches the broker
  can write one): placement must ask the apiserver and dead-letter it;
- `forged-node`: a node event doubling a real node's GPU memory, or deleting a node still there (alternately):
  both dead-lettered, the node's capacity and reservations unchanged;
- `missed-deletion`: a cluster-watcher is SIGKILLed, a bound pod deleted while it is down, and the watcher
  restarted: its re-list must free the pod's GPUs (seconds after the restart are measured).

Whether any of them broke something shows in the run's invariants (no pod lost or bound twice, no GPU
over-committed as the apiserver sees it, nothing held for pods gone); this module counts the faults and what
became of each forged record (dead-lettered or not), for the report.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer
from kubernetes_asyncio.client.exceptions import ApiException
from sqlalchemy import func, select

from gpuplace.adapters.kube import translate
from gpuplace.adapters.kube.cluster_api import raw_json
from gpuplace.adapters.postgres.tables import allocations, pods
from gpuplace.contracts import topics
from gpuplace.contracts.events import NodeEvent, PodEvent
from gpuplace.core.model import Node
from gpuplace.harness import chaos_fuzz
from gpuplace.harness.chaos_faults import Supervisor
from gpuplace.harness.pipeline_run import PipelineRun, kwok_node_manifest, list_pods_json

KINDS = ("node-recreate", "forged-bound", "forged-node", "missed-deletion")
START_SHARE = 0.3  # the faults begin after this share of the phase: pods must be running for them to mean much
NODE_AWAY_S = 3.0  # a deleted node stays away this long: the watcher sees it go, placement marks it absent
WATCHER_DOWN_S = 6.0  # a missed deletion's watcher is down this long
CANDIDATE_WAIT_S = 30.0  # a fault that needs a (bound) pod waits this long for one, then is skipped
FREED_TIMEOUT_S = 120.0  # a missed deletion not freed by then is left to the run's invariants


@dataclass
class TruthCounts:
    """How many of each fault the run makes (ChaosConfig carries them)."""

    node_recreates: int = 2
    forged_bound: int = 4
    forged_nodes: int = 4  # alternately a doubled GPU memory and a deletion of a node still there
    missed_deletions: int = 2

    def plan(self, rng: random.Random) -> list[str]:
        kinds = (["node-recreate"] * self.node_recreates + ["forged-bound"] * self.forged_bound
                 + ["forged-node"] * self.forged_nodes + ["missed-deletion"] * self.missed_deletions)
        rng.shuffle(kinds)
        return kinds


@dataclass
class TruthFaults:
    """Makes the faults (run) and says what they were (summary). `at` gives seconds since the run began."""

    layout: PipelineRun
    supervisor: Supervisor
    counts: TruthCounts
    seed: int
    at: Callable[[], float]
    region: str = "local"
    recreated: list[dict[str, Any]] = field(default_factory=list)
    forged: dict[str, dict[str, Any]] = field(default_factory=dict)  # sha256 of the record -> what it forged
    missed: list[dict[str, Any]] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)  # faults that found nothing to act on
    _freeing: list[asyncio.Task[None]] = field(default_factory=list)
    _uow_factory: Any = None

    async def run(self, apis: dict[str, Any], fleets: dict[str, list[Node]], producer: AIOKafkaProducer,
                  uow_factory: Any, phase_s: float) -> None:
        """The faults, spread from START_SHARE of the phase to its end, one at a time; then wait (bounded) for
        the missed deletions to be freed."""
        self._uow_factory = uow_factory
        rng = random.Random(self.seed + 40)  # its own stream: the kills and pods of a seed stay as they were
        plan, started = self.counts.plan(rng), time.monotonic()
        for j, kind in enumerate(plan):
            offset = phase_s * (START_SHARE + (1 - START_SHARE) * j / max(1, len(plan)))
            await asyncio.sleep(max(0.0, started + offset - time.monotonic()))
            cluster = rng.choice(list(self.layout.clusters))
            api = apis[self.layout.clusters[cluster]]
            if kind == "node-recreate":
                await self._node_recreate(api, cluster, fleets[cluster])
            elif kind == "forged-bound":
                await self._forged_bound(producer, api, cluster, fleets[cluster], rng)
            elif kind == "forged-node":
                await self._forged_node(producer, api, cluster, rng.choice(fleets[cluster]).name, rng)
            else:
                await self._missed_deletion(api, cluster, uow_factory, rng)
        await asyncio.gather(*self._freeing)

    async def _live(self, api: Any, *, bound: bool = False) -> list[dict[str, Any]]:
        """The run's pods not being deleted (only bound ones, with `bound`), waiting up to CANDIDATE_WAIT_S for
        one: early in a short run nothing may be placed yet. Empty when none came."""
        deadline = time.monotonic() + CANDIDATE_WAIT_S
        while True:
            found = [p for p in await list_pods_json(api, self.layout.namespace)
                     if not p["metadata"].get("deletionTimestamp") and (not bound or (p.get("spec") or {}).get(
                         "nodeName"))]
            if found or time.monotonic() > deadline:
                return found
            await asyncio.sleep(1.0)

    async def _node_recreate(self, api: Any, cluster: str, fleet: list[Node]) -> None:
        """Delete the node with the most pods and register it again under the same name, its pods left running."""
        on = Counter(p["spec"]["nodeName"] for p in await self._live(api, bound=True))
        node = max(fleet, key=lambda n: (on[n.name], n.name))
        at, started = self.at(), time.monotonic()
        await api.core.delete_node(node.name)
        await _until_gone(lambda: api.core.read_node(node.name))
        await asyncio.sleep(NODE_AWAY_S)
        await raw_json(await api.core.create_node(kwok_node_manifest(node, self.layout.config.run_id),
                                                  _preload_content=False))
        self.recreated.append({"cluster": cluster, "node": node.name, "pods_on_it": on[node.name], "at_s": at,
                               "away_s": round(time.monotonic() - started, 1)})

    async def _forged_bound(self, producer: AIOKafkaProducer, api: Any, cluster: str, fleet: list[Node],
                            rng: random.Random) -> None:
        """A `bound` event for a live pod naming a node it is not on."""
        live = await self._live(api)
        if not live:
            self.skipped["forged-bound"] += 1
            return
        pod = rng.choice(live)
        on = (pod.get("spec") or {}).get("nodeName")
        node = rng.choice([n.name for n in fleet if n.name != on])
        meta = pod["metadata"]
        event = PodEvent(cluster=cluster, kind="bound", namespace=self.layout.namespace, name=meta["name"],
                         uid=meta["uid"], node_name=node)
        await self._forge(producer, topics.PODS, event, {"kind": "bound", "pod": meta["name"], "node": node,
                                                         "bound_to": on, "held_as": await self._held_as(event)})

    async def _held_as(self, event: PodEvent) -> str | None:
        """The pod's state in PostgreSQL as the forged event is sent (what placement weighs it against)."""
        query = select(pods.c.state, pods.c.node).where(pods.c.cluster == event.cluster, pods.c.uid == event.uid)
        try:
            async with self._uow_factory.engine.connect() as conn:
                row = (await conn.execute(query)).first()
        except Exception as exc:  # noqa: BLE001 - PostgreSQL may be restarting (by this very run)
            return f"unknown ({exc.__class__.__name__})"
        return f"{row.state} on {row.node}" if row is not None else None

    async def _forged_node(self, producer: AIOKafkaProducer, api: Any, cluster: str, name: str,
                           rng: random.Random) -> None:
        """A real node's GPU memory doubled, or its deletion while it is still there (alternately)."""
        capacity = sum(1 for f in self.forged.values() if f["kind"] == "node capacity")
        deletion = sum(1 for f in self.forged.values() if f["kind"] == "node deletion")
        if capacity <= deletion:
            real = translate.node_event(await raw_json(await api.core.read_node(name, _preload_content=False)),
                                        cluster=cluster, region=self.region)
            event = real.model_copy(update={"gpu_memory_mib": 2 * real.gpu_memory_mib})
            what = {"kind": "node capacity", "node": name, "gpu_memory_mib": event.gpu_memory_mib}
        else:
            event = NodeEvent(cluster=cluster, kind="deleted", name=name)
            what = {"kind": "node deletion", "node": name}
        await self._forge(producer, topics.NODES, event, what)

    async def _forge(self, producer: AIOKafkaProducer, topic: str, event: PodEvent | NodeEvent,
                     what: dict[str, Any]) -> None:
        body = event.model_dump_json(by_alias=True).encode()
        await producer.send_and_wait(topic + self.layout.suffix, body, key=event.kafka_key(),
                                     headers=list(chaos_fuzz.JSON_HEADER))
        self.forged[hashlib.sha256(body).hexdigest()] = {**what, "cluster": event.cluster, "at_s": self.at()}

    async def _missed_deletion(self, api: Any, cluster: str, uow_factory: Any, rng: random.Random) -> None:
        """Kill the cluster's watcher, delete a bound pod while it is down; it restarts after WATCHER_DOWN_S."""
        bound = await self._live(api, bound=True)
        if not bound:
            self.skipped["missed-deletion"] += 1
            return
        meta = rng.choice(bound)["metadata"]
        while not self.supervisor.kill(f"cluster-watcher:{cluster}", WATCHER_DOWN_S, tally=False):
            await asyncio.sleep(0.5)  # down already (a kill of the run): wait for it to come back first
        restart = time.monotonic() + WATCHER_DOWN_S
        record = {"cluster": cluster, "pod": meta["name"], "at_s": self.at()}
        try:
            await api.core.delete_namespaced_pod(meta["name"], self.layout.namespace, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise
        await _until_gone(lambda: api.core.read_namespaced_pod(meta["name"], self.layout.namespace))
        record["deleted_before_restart"] = time.monotonic() < restart
        self.missed.append(record)
        self._freeing.append(asyncio.create_task(self._time_freed(record, uow_factory, cluster, meta["uid"],
                                                                  restart)))

    async def _time_freed(self, record: dict[str, Any], uow_factory: Any, cluster: str, uid: str,
                          restart: float) -> None:
        """Seconds from the watcher's restart until PostgreSQL holds nothing for the pod (negative: freed before
        it, by a reconciliation); None if not within FREED_TIMEOUT_S."""
        query = select(func.count()).select_from(allocations).where(allocations.c.cluster == cluster,
                                                                     allocations.c.pod_uid == uid)
        deadline = time.monotonic() + FREED_TIMEOUT_S
        record["freed_s_after_watcher_restart"] = None
        while time.monotonic() < deadline:
            try:
                async with uow_factory.engine.connect() as conn:
                    held = int((await conn.execute(query)).scalar_one())
            except Exception:  # noqa: BLE001 - PostgreSQL may be restarting (by this very run): ask again
                held = 1
            if not held:
                record["freed_s_after_watcher_restart"] = round(time.monotonic() - restart, 1)
                return
            await asyncio.sleep(0.5)

    def summary(self, dead_lettered: Counter[str]) -> dict[str, Any]:
        """For the report: each fault made, and of the forged records how many were dead-lettered."""
        by_kind: dict[str, dict[str, int]] = {}
        for sha, what in self.forged.items():
            counts = by_kind.setdefault(what["kind"], {"sent": 0, "dead_lettered": 0})
            counts["sent"] += 1
            counts["dead_lettered"] += sha in dead_lettered
        return {"node_recreates": self.recreated, "forged": by_kind,
                "forged_not_dead_lettered": [w for sha, w in self.forged.items() if sha not in dead_lettered][:20],
                "missed_deletions": self.missed, "skipped": dict(self.skipped)}

    def forged_digests(self) -> set[str]:
        return set(self.forged)


async def _until_gone(read: Callable[[], Any], timeout_s: float = 30.0) -> None:
    """Poll `read` (an apiserver GET) until it answers 404."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            await read()
        except ApiException as exc:
            if exc.status == 404:
                return
            raise
        await asyncio.sleep(0.2)
    raise TimeoutError(f"still there after {timeout_s:.0f} s")


__all__ = ["TruthCounts", "TruthFaults", "KINDS", "START_SHARE", "NODE_AWAY_S", "WATCHER_DOWN_S", "CANDIDATE_WAIT_S",
           "FREED_TIMEOUT_S"]
