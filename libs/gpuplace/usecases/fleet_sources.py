"""Where the fleet report's figures come from: the fleet state in PostgreSQL, or an event log replayed.

Both build, per cluster, what placement decides against (a ClusterView: capacity, and every hold charged), the
pods whose shapes make the typical workload, the pods that wait with why, and the latency per workload, and hand
them to fleet_report.cluster_figures: the two sources differ in where the state comes from, not in the figures.

The database knows a cluster's region: the cluster watcher stamps every node event with its GPUPLACE_REGION, and
`nodes.region` keeps it (the default, `local`, where none was set). A log carries the same region on its node
events. A cluster without nodes has no region to tell: `unknown`.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuplace.contracts import topics
from gpuplace.usecases.cluster_view import ClusterView, core_pod
from gpuplace.usecases.fleet_report import FleetReport, cluster_figures, region_of, summarize_windows
from gpuplace.usecases.pod_states import HOLDING, WAITING
from gpuplace.usecases.ports import Row
from gpuplace.usecases.replay import Entry, Replayer
from gpuplace.usecases.repositories import UnitOfWorkFactory


async def from_database(uow_factory: UnitOfWorkFactory, clusters: Sequence[str] = ()) -> FleetReport:
    """Every cluster the database knows (or those of `clusters` it knows), read in one transaction per cluster,
    as placement re-reads one."""
    report = FleetReport("postgresql")
    async with uow_factory() as uow:
        names = await uow.nodes.cluster_names()
    if clusters:
        unknown = sorted(set(clusters) - set(names))
        names = [n for n in names if n in set(clusters)]
        report.notes += [f"cluster {name}: the database knows no node or pod of it" for name in unknown]
    for cluster in names:
        async with uow_factory() as uow:
            nodes = await uow.nodes.load_nodes(cluster)
            gpus = await uow.nodes.load_gpus(cluster)
            allocations = await uow.allocations.load_allocations(cluster)
            holders = await uow.pods.pods_in_state(cluster, HOLDING)
            waiting = [p for p in await uow.pods.pods_in_state(cluster, WAITING) if p.get("managed", True)]
            latency = await uow.latency.latency_by_workload(cluster)
        view = ClusterView.hydrate(cluster, nodes, gpus, allocations, holders)
        report.clusters.append(cluster_figures(
            cluster, region_of(n["region"] for n in nodes), view,
            workload_pods=[core_pod(r) for r in [*holders, *waiting]], waiting=waiting, latency=latency))
    if not names and not clusters:
        report.notes.append("the database knows no cluster yet: no node or pod was ever stored")
    return report


def from_log(entries: Sequence[Entry], *, source: str, policy: str | None = None,
             clusters: Sequence[str] = ()) -> FleetReport:
    """The state a log leaves each of its clusters in, replayed (usecases/replay.py) with the recorded decisions,
    or with `policy`'s own as a what-if. Waiting pods take the reasons of their latest recorded `unschedulable`
    decision (a what-if's pods have none: its policy's reasons are not recorded)."""
    report = FleetReport(source if policy is None else f"{source}, what-if with policy {policy}")
    found = sorted({str(e.event["cluster"]) for e in entries
                    if e.topic in (topics.NODES, topics.PODS) and e.event.get("cluster")})
    names = [c for c in found if not clusters or c in set(clusters)]
    for cluster in names:
        replayer = Replayer(cluster, policy=policy)
        replayer.feed(entries)
        state = replayer.final_state()
        reasons = {} if policy is not None else _recorded_reasons(entries, cluster)
        waiting = [{**row, "state": "unschedulable" if row["uid"] in reasons or policy else "pending",
                    "reason": reasons.get(row["uid"])} for row in state.waiting]
        windows = [e.event for e in entries if e.topic == topics.LATENCY and e.event.get("cluster") == cluster]
        report.clusters.append(cluster_figures(
            cluster, region_of(state.regions.values()), state.view,
            workload_pods=[core_pod(r) for r in [*state.holders, *state.waiting]], waiting=waiting,
            latency=summarize_windows(w for w in windows if _is_window(w))))
    if not names:
        report.notes.append(f"{source}: no node or pod event in the log" + (" of cluster(s) " + ", ".join(clusters)
                                                                              if clusters else ""))
    return report


def _recorded_reasons(entries: Sequence[Entry], cluster: str) -> dict[str, str]:
    """uid -> the reasons of its latest `unschedulable` decision, in the words placement stores on the pod's row;
    a pod decided after it is dropped."""
    reasons: dict[str, str] = {}
    for e in entries:
        if e.topic != topics.PLACEMENTS or e.event.get("cluster") != cluster:
            continue
        uid, kind = e.event.get("pod_uid"), e.event.get("kind")
        if uid and kind == "unschedulable":
            reasons[uid] = "; ".join(f"{k}: {v}" for k, v in (e.event.get("reasons") or {}).items())
        elif uid and kind == "decided":
            reasons.pop(uid, None)
    return reasons


def _is_window(event: Row) -> bool:
    return all(event.get(k) is not None for k in ("workload", "frames", "deadline_misses", "p95_ms"))


__all__ = ["from_database", "from_log"]
