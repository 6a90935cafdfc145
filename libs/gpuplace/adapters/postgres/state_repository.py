"""SQL for the fleet state: nodes, GPUs, pods, allocations, decisions, defrag plans, outbox, processed events.

Every method runs inside the caller's transaction (see unit_of_work.py). Capacity is checked by the
database itself: `reserve()` adds to a GPU's assigned memory only where the sum stays within capacity,
and fails the whole reservation otherwise, so concurrent placement workers cannot over-commit a GPU.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, fields
from typing import Any, TypeVar, cast

from sqlalchemy import Result, and_, delete, func, select, text, update
from sqlalchemy import Row as SqlRow
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from gpuplace.adapters.postgres.tables import (
    allocations,
    decisions,
    defrag_moves,
    defrag_plans,
    gpus,
    latency_models,
    latency_windows,
    nodes,
    outbox,
    pods,
    processed_events,
)
from gpuplace.contracts.rejected import Rejected, reused_id
from gpuplace.usecases.pod_states import HOLDING, PLACED, WAITING, PodState, check, check_initial, sources
from gpuplace.usecases.ports import (
    AllocationRow,
    DecisionRow,
    DefragPlanRecord,
    GpuGrant,
    GpuRow,
    NodeRow,
    PlannedMove,
    PlanState,
    PodRow,
    Reservation,
    Row,
)

_T = TypeVar("_T")
_MOVE_FIELDS = tuple(f.name for f in fields(PlannedMove))  # defrag_moves' columns that a PlannedMove holds

# A batch's reservations (reserve_many), as arrays unnested into rows: one plan whatever the batch's size.
_RESERVE_NODES = text("""
    UPDATE nodes SET cpu_assigned_milli = nodes.cpu_assigned_milli + want.cpu,
                     memory_assigned_mib = nodes.memory_assigned_mib + want.mem
    FROM unnest(CAST(:names AS text[]), CAST(:cpus AS bigint[]), CAST(:mems AS bigint[])) AS want(name, cpu, mem)
    WHERE nodes.cluster = :cluster AND nodes.name = want.name
      AND nodes.cpu_assigned_milli + want.cpu <= nodes.cpu_milli
      AND nodes.memory_assigned_mib + want.mem <= nodes.memory_mib
    RETURNING nodes.name""")
_RESERVE_GPUS = text("""
    UPDATE gpus SET memory_assigned_mib = gpus.memory_assigned_mib + want.mem,
                    share_assigned_milli = gpus.share_assigned_milli + want.share
    FROM unnest(CAST(:nodes AS text[]), CAST(:idx AS int[]), CAST(:mems AS bigint[]), CAST(:shares AS bigint[]))
         AS want(node, idx, mem, share)
    WHERE gpus.cluster = :cluster AND gpus.node = want.node AND gpus.index = want.idx
      AND gpus.memory_assigned_mib + want.mem <= gpus.memory_total_mib
      AND gpus.share_assigned_milli + want.share <= 1000
    RETURNING gpus.node, gpus.index""")
_MARK_RESERVED = text("""
    UPDATE pods SET state = 'reserved', node = placed.node, reason = NULL, reserved_at = now()
    FROM unnest(CAST(:uids AS text[]), CAST(:nodes AS text[])) AS placed(uid, node)
    WHERE pods.cluster = :cluster AND pods.uid = placed.uid AND pods.state = ANY(CAST(:waiting AS text[]))
    RETURNING pods.uid""")


def _row(row: SqlRow[*tuple[Any, ...]]) -> Row:
    """A result row as the port's Row: its RowMapping, keyed by column name (SQLAlchemy types the keys wider)."""
    return cast(Row, row._mapping)


def _rows(result: Result[Any]) -> list[Row]:
    return [_row(r) for r in result]


def _typed(result: Result[Any], row_type: type[_T]) -> list[_T]:
    """Result rows as one of the port's typed rows (NodeRow, ...): their RowMappings, whose keys are the columns
    the TypedDict names (tables.py and ports.py declare them side by side; the contract suite reads them)."""
    return [cast(_T, r._mapping) for r in result]


def _pod(row: SqlRow[*tuple[Any, ...]]) -> PodRow:
    """A pods row as the port's PodRow (the columns tables.pods declares)."""
    return cast(PodRow, row._mapping)


def _per_gpu(node: Mapping[str, Any], key: str) -> list[int | None]:
    """A node's per-GPU topology list, or None per GPU where the node does not describe it."""
    values = node.get(key) or []
    return list(values) if len(values) == node["gpu_count"] else [None] * node["gpu_count"]


class StateRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    # -- idempotency -----------------------------------------------------------------------------
    async def claim_event(self, consumer: str, event_id: str, digest: str | None = None) -> bool:
        """Record `event_id` as processed by `consumer`; False if it already was (skip the event). Raises
        Rejected when it was, with another content `digest` (Envelope.digest): not a redelivery but a reused id."""
        stmt = insert(processed_events).values(consumer=consumer, event_id=event_id, digest=digest)
        result = await self._conn.execute(stmt.on_conflict_do_nothing().returning(processed_events.c.event_id))
        if result.first() is not None:
            return True
        if digest is not None:
            stored = (await self._conn.execute(select(processed_events.c.digest).where(
                processed_events.c.consumer == consumer, processed_events.c.event_id == event_id))).scalar()
            if stored is not None and stored != digest:
                raise Rejected(reused_id(event_id, stored, digest))
        return False

    async def claim_events(self, consumer: str, claims: Sequence[tuple[str, str | None]]) -> set[str]:
        if not claims:
            return set()
        claimed = set((await self._conn.execute(
            insert(processed_events).on_conflict_do_nothing().returning(processed_events.c.event_id),
            [{"consumer": consumer, "event_id": event_id, "digest": digest} for event_id, digest in claims],
        )).scalars())
        digests = {event_id: digest for event_id, digest in claims if event_id not in claimed and digest is not None}
        if digests:
            stored = await self._conn.execute(select(processed_events.c.event_id, processed_events.c.digest).where(
                processed_events.c.consumer == consumer, processed_events.c.event_id.in_(digests)))
            for event_id, digest in stored:
                if digest is not None and digest != digests[event_id]:
                    raise Rejected(reused_id(event_id, digest, digests[event_id]))
        return claimed

    # -- nodes and GPUs --------------------------------------------------------------------------
    async def upsert_node(self, node: Mapping[str, Any]) -> list[int]:
        """Insert or update a node and make its GPU rows match `gpu_count` (GPUs past it go, with their grants);
        `gpu_numa` / `gpu_nvlink`, when given, per GPU index (else NULL: not described)."""
        values = {k: node[k] for k in ("cluster", "name", "region", "cpu_milli", "memory_mib", "gpu_model",
                                       "gpu_count", "gpu_memory_mib", "ready", "unschedulable", "labels", "taints")}
        values.update(max_pods=node.get("max_pods"), extended=node.get("extended") or {}, absent_since=None)
        stmt = insert(nodes).values(**values)
        updates = {k: stmt.excluded[k] for k in values if k not in ("cluster", "name")}
        await self._conn.execute(stmt.on_conflict_do_update(
            index_elements=[nodes.c.cluster, nodes.c.name], set_={**updates, "updated_at": func.now()}))
        if node["gpu_count"]:
            numa, nvlink = _per_gpu(node, "gpu_numa"), _per_gpu(node, "gpu_nvlink")
            gpu_rows = [{"cluster": node["cluster"], "node": node["name"], "index": i, "model": node["gpu_model"],
                         "memory_total_mib": node["gpu_memory_mib"], "memory_reported_mib": node["gpu_memory_mib"],
                         "numa_node": numa[i], "nvlink_domain": nvlink[i]} for i in range(node["gpu_count"])]
            gstmt = insert(gpus).values(gpu_rows)
            await self._conn.execute(gstmt.on_conflict_do_update(
                index_elements=[gpus.c.cluster, gpus.c.node, gpus.c.index],
                set_={"model": gstmt.excluded.model, "memory_reported_mib": gstmt.excluded.memory_reported_mib,
                      "memory_total_mib": func.greatest(gstmt.excluded.memory_total_mib, gpus.c.memory_assigned_mib),
                      "numa_node": gstmt.excluded.numa_node, "nvlink_domain": gstmt.excluded.nvlink_domain}))
        await self._conn.execute(delete(gpus).where(
            gpus.c.cluster == node["cluster"], gpus.c.node == node["name"], gpus.c.index >= node["gpu_count"]))
        short = await self._conn.execute(select(gpus.c.index).where(
            gpus.c.cluster == node["cluster"], gpus.c.node == node["name"],
            gpus.c.memory_reported_mib < gpus.c.memory_assigned_mib).order_by(gpus.c.index))
        return [int(r[0]) for r in short]

    async def delete_node(self, cluster: str, name: str) -> list[str]:
        """Remove a node, or keep it absent while pods hold resources there (the port says why)."""
        uids = await self._holders(cluster, name)
        if uids:
            await self._conn.execute(update(nodes).where(nodes.c.cluster == cluster, nodes.c.name == name).values(
                absent_since=func.coalesce(nodes.c.absent_since, func.now())))
        else:
            await self._conn.execute(delete(nodes).where(nodes.c.cluster == cluster, nodes.c.name == name))
        return uids

    async def _holders(self, cluster: str, name: str) -> list[str]:
        """The pods holding resources on a node: GPU grants there, or a reserved/bound/promised row naming it."""
        held = await self._conn.execute(
            select(allocations.c.pod_uid).where(allocations.c.cluster == cluster, allocations.c.node == name)
            .union(select(pods.c.uid).where(pods.c.cluster == cluster, pods.c.node == name,
                                            pods.c.state.in_(HOLDING))))
        return sorted(r[0] for r in held)

    async def record_telemetry(self, cluster: str, node: str, index: int, **observed: Any) -> bool:
        """Store a GPU's observed memory/utilisation/health; False when the GPU is not in the inventory."""
        result = await self._conn.execute(update(gpus).where(
            gpus.c.cluster == cluster, gpus.c.node == node, gpus.c.index == index,
        ).values(**observed, telemetry_at=func.now()).returning(gpus.c.index))
        return result.first() is not None

    async def load_nodes(self, cluster: str) -> list[NodeRow]:
        result = await self._conn.execute(select(nodes).where(nodes.c.cluster == cluster).order_by(nodes.c.name))
        return _typed(result, NodeRow)

    async def load_gpus(self, cluster: str) -> list[GpuRow]:
        result = await self._conn.execute(
            select(gpus).where(gpus.c.cluster == cluster).order_by(gpus.c.node, gpus.c.index))
        return _typed(result, GpuRow)

    # -- pods --------------------------------------------------------------------------------------
    async def upsert_pod(self, pod: Mapping[str, Any]) -> PodRow:
        """Insert a pod seen for the first time, or refresh its request; returns the stored row.

        The pod's `state` is only set on insert: after that it moves through reserve/bind/release.
        """
        check_initial(pod["state"])
        stmt = insert(pods).values(**pod)
        refresh = {k: stmt.excluded[k] for k in pod if k not in ("cluster", "uid", "state", "node", "reason")}
        result = await self._conn.execute(stmt.on_conflict_do_update(
            index_elements=[pods.c.cluster, pods.c.uid], set_=refresh).returning(*pods.c))
        return _pod(result.one())

    async def upsert_pods(self, pods_: Sequence[Mapping[str, Any]]) -> list[PodRow]:
        if not pods_:
            return []
        for pod in pods_:
            check_initial(pod["state"])
        stmt = insert(pods)
        refresh = {k: stmt.excluded[k] for k in pods_[0] if k not in ("cluster", "uid", "state", "node", "reason")}
        result = await self._conn.execute(stmt.on_conflict_do_update(
            index_elements=[pods.c.cluster, pods.c.uid], set_=refresh).returning(*pods.c), [dict(p) for p in pods_])
        stored = {(row["cluster"], row["uid"]): row for row in _typed(result, PodRow)}
        return [stored[(pod["cluster"], pod["uid"])] for pod in pods_]

    async def get_pod(self, cluster: str, uid: str, *, for_update: bool = False) -> PodRow | None:
        stmt = select(pods).where(pods.c.cluster == cluster, pods.c.uid == uid)
        result = await self._conn.execute(stmt.with_for_update() if for_update else stmt)
        row = result.first()
        return _pod(row) if row else None

    async def set_pod_state(self, cluster: str, uid: str, state: PodState, *, mark_bound: bool = False,
                            **fields: Any) -> None:
        """Move a pod to `state`; `mark_bound` stamps bound_at with the database's clock. The UPDATE is guarded
        by the states that may move there (pod_states.sources), so a pod that moved meanwhile is not written
        over; only then is the pod read again, to say which move was refused."""
        if mark_bound:
            fields["bound_at"] = func.now()
        if state is PodState.RESERVED:
            fields["reserved_at"] = func.now()
        moved = await self._conn.execute(update(pods).where(
            pods.c.cluster == cluster, pods.c.uid == uid, pods.c.state.in_(sources(state))).values(
            state=state, **fields).returning(pods.c.uid))
        if moved.first() is None and (current := await self.get_pod(cluster, uid)) is not None:
            check(current["state"], state)

    async def pods_in_state(self, cluster: str, states: Sequence[PodState]) -> list[PodRow]:
        result = await self._conn.execute(select(pods).where(
            pods.c.cluster == cluster, pods.c.state.in_(states)).order_by(pods.c.first_seen_at))
        return _typed(result, PodRow)

    async def find_pods(self, name: str, *, namespace: str | None = None, cluster: str | None = None) -> list[PodRow]:
        """Pods by name, newest first; with a cluster, served by the index pods_by_name."""
        query = select(pods).where(pods.c.name == name)
        if namespace is not None:
            query = query.where(pods.c.namespace == namespace)
        if cluster is not None:
            query = query.where(pods.c.cluster == cluster)
        result = await self._conn.execute(query.order_by(pods.c.first_seen_at.desc(), pods.c.cluster, pods.c.uid))
        return _typed(result, PodRow)

    async def count_pods_by_state(self, clusters: Sequence[str]) -> dict[str, int]:
        """gpuplace's own pods by state (other schedulers' pods, only charged, are not counted)."""
        result = await self._conn.execute(select(pods.c.state, func.count()).where(
            pods.c.cluster.in_(clusters), pods.c.managed).group_by(pods.c.state))
        return {state: int(n) for state, n in result.all()}

    async def find_promise(self, cluster: str, namespace: str, owner: str) -> PodRow | None:
        """The oldest place promised to a replacement pod of `owner` (FOR UPDATE: one adopter wins)."""
        result = await self._conn.execute(select(pods).where(
            pods.c.cluster == cluster, pods.c.namespace == namespace, pods.c.owner == owner,
            pods.c.state == PodState.PROMISED).order_by(pods.c.first_seen_at, pods.c.uid).limit(1)
            .with_for_update(skip_locked=True))
        row = result.first()
        return _pod(row) if row else None

    async def transfer_allocations(self, cluster: str, from_uid: str, to_uid: str) -> list[Row]:
        """Give `from_uid`'s GPUs to `to_uid` (a promise adopted); returns the moved grants."""
        result = await self._conn.execute(update(allocations).where(
            allocations.c.cluster == cluster, allocations.c.pod_uid == from_uid).values(pod_uid=to_uid)
            .returning(allocations.c.node, allocations.c.gpu_index, allocations.c.memory_mib,
                       allocations.c.share_milli))
        return _rows(result)

    async def delete_pod(self, cluster: str, uid: str) -> None:
        await self._conn.execute(delete(pods).where(pods.c.cluster == cluster, pods.c.uid == uid))

    async def load_allocations(self, cluster: str) -> list[AllocationRow]:
        result = await self._conn.execute(select(allocations).where(allocations.c.cluster == cluster))
        return _typed(result, AllocationRow)

    # -- reservations ------------------------------------------------------------------------------
    async def reserve(self, *, cluster: str, pod_uid: str, node: str, grants: Iterable[GpuGrant],
                      cpu_milli: int, memory_mib: int, decision_id: str) -> str | None:
        """Take `grants` on `node` for the pod; None on success, else why it no longer fits.

        On a refusal the transaction holds partial updates: the caller must roll back (not commit).
        """
        node_ok = await self._conn.execute(update(nodes).where(
            nodes.c.cluster == cluster, nodes.c.name == node,
            nodes.c.cpu_assigned_milli + cpu_milli <= nodes.c.cpu_milli,
            nodes.c.memory_assigned_mib + memory_mib <= nodes.c.memory_mib,
        ).values(cpu_assigned_milli=nodes.c.cpu_assigned_milli + cpu_milli,
                 memory_assigned_mib=nodes.c.memory_assigned_mib + memory_mib).returning(nodes.c.name))
        if node_ok.first() is None:
            return f"node {node}: CPU or memory no longer fits"
        taken = []
        for g in grants:
            if not await self._take_gpu(cluster, node, g):
                return f"node {node} GPU {g.index}: no longer has {g.memory_mib} MiB free"
            taken.append(g)
        await self._allocate(cluster, pod_uid, node, taken, decision_id)
        return None

    async def reserve_many(self, cluster: str, reservations: Sequence[Reservation]) -> str | None:
        """reserve() for a batch in four statements, whatever its size: what the batch adds per node and per GPU
        is added where it still fits (UPDATE ... FROM unnest(arrays), the capacity checked row by row as
        reserve() checks it), and a row that did not fit refuses the whole batch; then the grants, and the pods'
        new state. Arrays, not a VALUES list, so each statement is compiled once and its plan cached."""
        if not reservations:
            return None
        per_node: dict[str, list[int]] = {}
        per_gpu: dict[tuple[str, int], list[int]] = {}
        for r in reservations:
            want = per_node.setdefault(r.node, [0, 0])
            want[0] += r.cpu_milli
            want[1] += r.memory_mib
            for g in r.grants:
                gpu = per_gpu.setdefault((r.node, g.index), [0, 0])
                gpu[0] += g.memory_mib
                gpu[1] += g.share_milli
        fitted = set((await self._conn.execute(_RESERVE_NODES, {
            "cluster": cluster, "names": list(per_node), "cpus": [c for c, _ in per_node.values()],
            "mems": [m for _, m in per_node.values()]})).scalars())
        if len(fitted) < len(per_node):
            return f"node {min(set(per_node) - fitted)}: CPU or memory no longer fits"
        if per_gpu:
            taken = (await self._conn.execute(_RESERVE_GPUS, {
                "cluster": cluster, "nodes": [n for n, _ in per_gpu], "idx": [i for _, i in per_gpu],
                "mems": [m for m, _ in per_gpu.values()], "shares": [s for _, s in per_gpu.values()]})).all()
            if len(taken) < len(per_gpu):
                node, index = min(set(per_gpu) - {(t.node, t.index) for t in taken})
                return f"node {node} GPU {index}: no longer has the memory the batch asks of it"
            await self._conn.execute(insert(allocations), [
                {"cluster": cluster, "pod_uid": r.pod_uid, "gpu_index": g.index, "node": r.node,
                 "memory_mib": g.memory_mib, "share_milli": g.share_milli, "decision_id": r.decision_id}
                for r in reservations for g in r.grants])
        marked = set((await self._conn.execute(_MARK_RESERVED, {
            "cluster": cluster, "uids": [r.pod_uid for r in reservations], "nodes": [r.node for r in reservations],
            "waiting": [s.value for s in WAITING]})).scalars())
        if len(marked) < len(reservations):
            return f"pod {min({r.pod_uid for r in reservations} - marked)} is no longer waiting"
        return None

    async def mark_bound(self, cluster: str, uids: Sequence[str]) -> list[str]:
        if not uids:
            return []
        result = await self._conn.execute(update(pods).where(
            pods.c.cluster == cluster, pods.c.uid.in_(uids), pods.c.state == PodState.RESERVED,
        ).values(state=PodState.BOUND, bound_at=func.now()).returning(pods.c.uid))
        return list(result.scalars())

    async def charge_bound(self, *, cluster: str, pod_uid: str, node: str, grants: Iterable[GpuGrant],
                           cpu_milli: int, memory_mib: int, decision_id: str) -> list[int]:
        """Charge a pod another scheduler bound: its CPU and memory always (the node runs it, whatever gpuplace
        thought was free), each GPU grant only where the GPU still has room; returns the GPU indices refused."""
        await self._conn.execute(update(nodes).where(nodes.c.cluster == cluster, nodes.c.name == node).values(
            cpu_assigned_milli=nodes.c.cpu_assigned_milli + cpu_milli,
            memory_assigned_mib=nodes.c.memory_assigned_mib + memory_mib))
        taken: list[GpuGrant] = []
        refused: list[GpuGrant] = []
        for g in grants:
            (taken if await self._take_gpu(cluster, node, g) else refused).append(g)
        await self._allocate(cluster, pod_uid, node, taken, decision_id)
        return [g.index for g in refused]

    async def _take_gpu(self, cluster: str, node: str, grant: GpuGrant) -> bool:
        """Add `grant` to its GPU's assigned share and memory, only where both stay within capacity."""
        ok = await self._conn.execute(update(gpus).where(
            gpus.c.cluster == cluster, gpus.c.node == node, gpus.c.index == grant.index,
            gpus.c.memory_assigned_mib + grant.memory_mib <= gpus.c.memory_total_mib,
            gpus.c.share_assigned_milli + grant.share_milli <= 1000,
        ).values(memory_assigned_mib=gpus.c.memory_assigned_mib + grant.memory_mib,
                 share_assigned_milli=gpus.c.share_assigned_milli + grant.share_milli).returning(gpus.c.index))
        return ok.first() is not None

    async def _allocate(self, cluster: str, pod_uid: str, node: str, grants: Sequence[GpuGrant],
                        decision_id: str) -> None:
        if grants:  # a pod without GPUs takes CPU and memory only
            await self._conn.execute(insert(allocations).values([
                {"cluster": cluster, "pod_uid": pod_uid, "gpu_index": g.index, "node": node,
                 "memory_mib": g.memory_mib, "share_milli": g.share_milli, "decision_id": decision_id}
                for g in grants]))

    async def release(self, cluster: str, pod_uid: str, *, cpu_milli: int, memory_mib: int) -> str | None:
        """Give back everything the pod holds; returns the node it held, None if it held nothing.

        A pod without GPUs holds CPU and memory on the node its row names (reserved or bound)."""
        held = await self._conn.execute(delete(allocations).where(
            allocations.c.cluster == cluster, allocations.c.pod_uid == pod_uid,
        ).returning(allocations.c.node, allocations.c.gpu_index, allocations.c.memory_mib, allocations.c.share_milli))
        grants = held.all()
        for g in grants:  # a GPU that reports less than was held comes down towards its report (upsert_node)
            await self._conn.execute(update(gpus).where(
                gpus.c.cluster == cluster, gpus.c.node == g.node, gpus.c.index == g.gpu_index,
            ).values(memory_assigned_mib=gpus.c.memory_assigned_mib - g.memory_mib,
                     share_assigned_milli=gpus.c.share_assigned_milli - g.share_milli,
                     memory_total_mib=func.greatest(func.coalesce(gpus.c.memory_reported_mib, gpus.c.memory_total_mib),
                                                    gpus.c.memory_assigned_mib - g.memory_mib)))
        node = grants[0].node if grants else await self._conn.scalar(select(pods.c.node).where(
            pods.c.cluster == cluster, pods.c.uid == pod_uid, pods.c.state.in_(HOLDING)))
        if node is None:
            return None
        absent = await self._conn.scalar(update(nodes).where(nodes.c.cluster == cluster, nodes.c.name == node).values(
            cpu_assigned_milli=nodes.c.cpu_assigned_milli - cpu_milli,
            memory_assigned_mib=nodes.c.memory_assigned_mib - memory_mib).returning(nodes.c.absent_since))
        if absent is not None and not set(await self._holders(cluster, node)) - {pod_uid}:
            await self._conn.execute(delete(nodes).where(nodes.c.cluster == cluster, nodes.c.name == node))
        return node

    # -- decisions and outbox ------------------------------------------------------------------------
    async def add_decisions(self, decisions_: Sequence[Mapping[str, Any]]) -> None:
        if decisions_:
            await self._conn.execute(insert(decisions), [dict(d) for d in decisions_])

    async def decisions_of(self, cluster: str, pod_uid: str) -> list[DecisionRow]:
        """The pod's decisions, oldest first (index decisions_by_pod); within one transaction in no set order."""
        result = await self._conn.execute(select(decisions).where(
            decisions.c.cluster == cluster, decisions.c.pod_uid == pod_uid).order_by(decisions.c.created_at))
        return _typed(result, DecisionRow)

    async def decisions_with_reason(self, cluster: str, kind: str, key: str, value: str) -> list[DecisionRow]:
        """Decisions of `kind` with reasons[key] == value: a scan of the cluster's decisions of that kind, for the
        rare question `gpuplace explain` asks (who adopted a promise), not for a hot path."""
        result = await self._conn.execute(select(decisions).where(
            decisions.c.cluster == cluster, decisions.c.kind == kind, decisions.c.reasons[key].astext == value)
            .order_by(decisions.c.created_at))
        return _typed(result, DecisionRow)

    # -- defragmentation plans ----------------------------------------------------------------------------
    async def add_plan(self, plan: DefragPlanRecord) -> None:
        await self._conn.execute(insert(defrag_plans).values(
            cluster=plan.cluster, plan_id=plan.plan_id, beneficiary_uid=plan.beneficiary_uid, state=plan.state))
        if plan.moves:
            await self._conn.execute(insert(defrag_moves), [
                {"cluster": plan.cluster, "plan_id": plan.plan_id, "seq": i, **asdict(m),
                 "from_gpu_indices": list(m.from_gpu_indices)} for i, m in enumerate(plan.moves)])

    async def open_plans(self, cluster: str) -> list[DefragPlanRecord]:
        result = await self._conn.execute(select(defrag_plans).where(
            defrag_plans.c.cluster == cluster, defrag_plans.c.state == PlanState.PLANNED)
            .order_by(defrag_plans.c.planned_at, defrag_plans.c.plan_id))
        return [await self._plan(row) for row in result.all()]

    async def plan_state(self, cluster: str, plan_id: str) -> PlanState | None:
        state = await self._conn.scalar(select(defrag_plans.c.state).where(
            defrag_plans.c.cluster == cluster, defrag_plans.c.plan_id == plan_id))
        return PlanState(state) if state else None

    async def settle_plan(self, cluster: str, plan_id: str, state: PlanState, reason: str | None = None) -> bool:
        """One conditional UPDATE: the row lock makes a second settler wait, then find the plan settled."""
        settled = await self._conn.execute(update(defrag_plans).where(
            defrag_plans.c.cluster == cluster, defrag_plans.c.plan_id == plan_id,
            defrag_plans.c.state == PlanState.PLANNED)
            .values(state=state, reason=reason, settled_at=func.now()).returning(defrag_plans.c.plan_id))
        return settled.first() is not None

    async def plan_moving(self, cluster: str, uid: str) -> DefragPlanRecord | None:
        """Index defrag_moves_by_pod; a pod moved again later is in a later plan."""
        row = (await self._conn.execute(select(defrag_plans).join(defrag_moves, and_(
            defrag_moves.c.cluster == defrag_plans.c.cluster, defrag_moves.c.plan_id == defrag_plans.c.plan_id))
            .where(defrag_moves.c.cluster == cluster, defrag_moves.c.uid == uid)
            .order_by(defrag_plans.c.planned_at.desc()).limit(1))).first()
        return await self._plan(row) if row else None

    async def _plan(self, row: SqlRow[*tuple[Any, ...]]) -> DefragPlanRecord:
        moves = await self._conn.execute(select(*(defrag_moves.c[f] for f in _MOVE_FIELDS)).where(
            defrag_moves.c.cluster == row.cluster, defrag_moves.c.plan_id == row.plan_id)
            .order_by(defrag_moves.c.seq))
        return DefragPlanRecord(
            cluster=row.cluster, plan_id=row.plan_id, beneficiary_uid=row.beneficiary_uid,
            state=PlanState(row.state), reason=row.reason,
            moves=tuple(PlannedMove(**{**m._mapping, "from_gpu_indices": tuple(m.from_gpu_indices)})
                        for m in moves))

    async def add_outbox(self, topic: str, key: str, payload_json: str) -> None:
        await self._conn.execute(insert(outbox).values(topic=topic, key=key, payload=json.loads(payload_json)))

    async def add_outbox_many(self, entries: Sequence[tuple[str, str, str]]) -> None:
        if entries:
            await self._conn.execute(insert(outbox), [
                {"topic": topic, "key": key, "payload": json.loads(payload)} for topic, key, payload in entries])

    async def take_unpublished(self, limit: int) -> list[Row]:
        """Lock a batch of unpublished outbox rows; other relays skip them (SKIP LOCKED)."""
        result = await self._conn.execute(select(outbox).where(outbox.c.published_at.is_(None))
                                          .order_by(outbox.c.id).limit(limit).with_for_update(skip_locked=True))
        return _rows(result)

    async def mark_published(self, ids: Sequence[int]) -> None:
        await self._conn.execute(update(outbox).where(outbox.c.id.in_(ids)).values(published_at=func.now()))

    async def count_unpublished(self) -> int:
        """Served by the partial index `outbox_unpublished`: as cheap as the backlog is short."""
        query = select(func.count()).select_from(outbox).where(outbox.c.published_at.is_(None))
        return int((await self._conn.execute(query)).scalar_one())

    async def count_bound_twice(self, cluster: str) -> int:
        """Pods with more than one `bound` decision: must always be zero."""
        twice = select(decisions.c.pod_uid).where(decisions.c.cluster == cluster, decisions.c.kind == "bound") \
            .group_by(decisions.c.pod_uid).having(func.count() > 1).subquery()
        return int((await self._conn.execute(select(func.count()).select_from(twice))).scalar_one())

    # -- latency -------------------------------------------------------------------------------------
    async def add_latency_window(self, window: Mapping[str, Any]) -> None:
        await self._conn.execute(insert(latency_windows).values(**window))

    async def cluster_names(self) -> list[str]:
        result = await self._conn.execute(select(nodes.c.cluster).union(select(pods.c.cluster)))
        return sorted(str(name) for name in result.scalars())

    async def latency_by_workload(self, cluster: str) -> list[Row]:
        w = latency_windows
        result = await self._conn.execute(select(
            w.c.workload, func.count().label("windows"), func.sum(w.c.frames).label("frames"),
            func.sum(w.c.deadline_misses).label("deadline_misses"),
            func.percentile_cont(0.95).within_group(w.c.p95_ms).label("p95_ms"),
            func.max(w.c.p95_ms).label("worst_p95_ms"), func.min(w.c.deadline_ms).label("deadline_ms"),
        ).where(w.c.cluster == cluster).group_by(w.c.workload).order_by(w.c.workload))
        return [{**r, "frames": int(r["frames"]), "deadline_misses": int(r["deadline_misses"])}
                for r in _rows(result)]

    async def flag_slo_violation(self, cluster: str, pod_uid: str, node: str, gpu_index: int) -> bool:
        """Close the GPU to new pods and mark the pod for a move; False if both were already so."""
        blocked = await self._conn.execute(update(gpus).where(
            gpus.c.cluster == cluster, gpus.c.node == node, gpus.c.index == gpu_index, gpus.c.slo_blocked_at.is_(None),
        ).values(slo_blocked_at=func.now()).returning(gpus.c.index))
        marked = await self._conn.execute(update(pods).where(
            pods.c.cluster == cluster, pods.c.uid == pod_uid, pods.c.move_requested_at.is_(None),
        ).values(move_requested_at=func.now()).returning(pods.c.uid))
        return blocked.first() is not None or marked.first() is not None

    async def load_latency_model(self, name: str, *, for_update: bool = False) -> dict[str, Any] | None:
        stmt = select(latency_models.c.state).where(latency_models.c.name == name)
        row = (await self._conn.execute(stmt.with_for_update() if for_update else stmt)).first()
        return row.state if row else None

    async def save_latency_model(self, name: str, state: Mapping[str, Any]) -> None:
        stmt = insert(latency_models).values(name=name, state=dict(state), windows=1)
        await self._conn.execute(stmt.on_conflict_do_update(index_elements=[latency_models.c.name], set_={
            "state": stmt.excluded.state, "windows": latency_models.c.windows + 1, "updated_at": func.now()}))

    async def co_runners(self, cluster: str, node: str, gpu_index: int, *, exclude_uid: str) -> list[Row]:
        """The other pods holding this GPU, with what the latency model needs of them."""
        result = await self._conn.execute(
            select(pods.c.uid, pods.c.frame_rate_hz, pods.c.workload, pods.c.deadline_ms)
            .join(allocations, and_(pods.c.cluster == allocations.c.cluster, pods.c.uid == allocations.c.pod_uid))
            .where(allocations.c.cluster == cluster, allocations.c.node == node,
                   allocations.c.gpu_index == gpu_index, pods.c.uid != exclude_uid))
        return _rows(result)

    async def gpu_of_pod(self, cluster: str, namespace: str, name: str) -> Row | None:
        result = await self._conn.execute(
            select(allocations.c.node, allocations.c.gpu_index, pods.c.uid, pods.c.deadline_ms, pods.c.frame_rate_hz,
                   pods.c.workload, gpus.c.model)
            .join(gpus, and_(gpus.c.cluster == allocations.c.cluster, gpus.c.node == allocations.c.node,
                             gpus.c.index == allocations.c.gpu_index))
            .join(pods, and_(pods.c.cluster == allocations.c.cluster, pods.c.uid == allocations.c.pod_uid))
            .where(pods.c.cluster == cluster, pods.c.namespace == namespace, pods.c.name == name,
                   pods.c.state.in_(PLACED)).limit(1))
        row = result.first()
        return _row(row) if row else None


__all__ = ["StateRepository"]
