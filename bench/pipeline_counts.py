"""Kafka records and PostgreSQL rows one pod costs in the pipeline, counted on a real run, its deletion included.

    python bench/pipeline_counts.py --nodes 20 --pods 400 --out bench/results/pipeline-counts

runs `gpuplace bench pipeline`'s PipelineRun once (services as processes, as deployed) and, around it:
- before the pods are submitted: PostgreSQL's table counters (pg_stat_user_tables: rows inserted, updated, deleted)
  and WAL position, and each component's CPU (cli/cpu_accounting);
- once every pod is bound: the same, then every pod of the run deleted (what a pod's end looks like to gpuplace)
  and, once placement has recorded each deleted, the same again, after PostgreSQL's statistics were flushed;
- then the run's own records on its topics (they carry its run id), by topic and kind, with their size.
So the report gives records and rows per pod for the way in (pending -> bound) and the way out (deleted), and what
each component spent on each. The run has a database of its own (created, migrated, dropped at the end), so the
table counters are the run's alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import asyncpg
from pg_capacity import scratch_databases  # bench/, beside this script
from pydantic import SecretStr
from sqlalchemy import make_url

from gpuplace.adapters.kafka.event_log import read_cluster_log
from gpuplace.bootstrap import cluster_api
from gpuplace.contracts import topics
from gpuplace.harness import cpu_accounting
from gpuplace.harness.pipeline_run import PipelineRun, RunConfig, RunResult
from gpuplace.harness.stack_run import local_stack
from gpuplace.settings import Settings

STATS_FLUSH_S = 11.0  # a backend idle flushes its table counters within PGSTAT_IDLE_INTERVAL (10 s, PostgreSQL 15)
_TICKS = os.sysconf("SC_CLK_TCK")
TABLES = ("pods", "allocations", "gpus", "nodes", "decisions", "outbox", "processed_events")


def _service_cpu_s() -> dict[str, float]:
    """CPU seconds so far of each `gpuplace service NAME` child of this process (the run's services), by NAME."""
    found: dict[str, float] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat[1]) == os.getpid() and b"service" in argv[:-2]:
            name = argv[argv.index(b"service") + 1].decode()
            found[name] = found.get(name, 0.0) + (int(stat[11]) + int(stat[12])) / _TICKS
    return found


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class Counts:
    """The hooks PipelineRun calls, and what they saw."""

    def __init__(self, database_url: str) -> None:
        self.dsn = _dsn(database_url)
        self.marks: dict[str, dict[str, Any]] = {}
        self.rows_by_cluster: dict[str, int] = {}
        self.records: dict[str, dict[str, list[int]]] = {}

    async def _mark(self, name: str) -> None:
        """CPU now; table counters and WAL once the backends have flushed their counters."""
        cpu = {**cpu_accounting.mark(), **{f"service {k}": v for k, v in _service_cpu_s().items()}}
        await asyncio.sleep(STATS_FLUSH_S)
        conn = await asyncpg.connect(self.dsn)
        try:
            rows = await conn.fetch("SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables "
                                    "WHERE relname = ANY($1::text[])", list(TABLES))
            wal = int(await conn.fetchval("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"))
        finally:
            await conn.close()
        self.marks[name] = {"tables": {r["relname"]: [r["n_tup_ins"], r["n_tup_upd"], r["n_tup_del"]] for r in rows},
                            "wal": wal, "cpu": cpu}

    async def before(self, run: PipelineRun) -> None:
        await self._mark("submit")

    async def after(self, run: PipelineRun) -> None:
        await self._mark("bound")
        self.rows_by_cluster = await self._by_cluster(run)
        for name in run.clusters.values():
            config = run.config.kubeconfigs[name]
            await _delete_pods(config, run.namespace)
        await self._wait_deleted(run)
        await self._mark("deleted")
        self.records = await _records(run)

    async def _by_cluster(self, run: PipelineRun) -> dict[str, int]:
        conn = await asyncpg.connect(self.dsn)
        clusters = list(run.clusters)
        try:
            return {
                "bound": await conn.fetchval("SELECT count(*) FROM pods WHERE cluster = ANY($1) AND state = 'bound'",
                                             clusters),
                "pods": await conn.fetchval("SELECT count(*) FROM pods WHERE cluster = ANY($1)", clusters),
                "allocations": await conn.fetchval("SELECT count(*) FROM allocations WHERE cluster = ANY($1)",
                                                   clusters),
                "decisions": await conn.fetchval("SELECT count(*) FROM decisions WHERE cluster = ANY($1)", clusters),
                "outbox": await conn.fetchval("SELECT count(*) FROM outbox WHERE split_part(key, '/', 1) = ANY($1)",
                                              clusters),
            }
        finally:
            await conn.close()

    async def _wait_deleted(self, run: PipelineRun, timeout_s: float = 120.0) -> None:
        conn = await asyncpg.connect(self.dsn)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                left = await conn.fetchval("SELECT count(*) FROM pods WHERE cluster = ANY($1) AND state <> 'deleted'",
                                           list(run.clusters))
                if left == 0:
                    return
                await asyncio.sleep(1.0)
            raise TimeoutError(f"{left} pod(s) of the run not recorded deleted after {timeout_s:.0f} s")
        finally:
            await conn.close()


async def _delete_pods(kubeconfig: str, namespace: str) -> None:
    async with cluster_api(kubeconfig) as api:
        await api.core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)


async def _records(run: PipelineRun) -> dict[str, dict[str, list[int]]]:
    """topic -> kind -> [records, bytes (key + compact JSON value)] of the run's clusters."""
    found: dict[str, dict[str, list[int]]] = {}
    for cluster in run.clusters:
        log = await read_cluster_log(run.settings.kafka, cluster=cluster, suffix=run.suffix,
                                     topic_names=[topics.PODS, topics.PLACEMENTS, topics.NODES])
        for record in log.records:
            size = len(json.dumps(record.event, separators=(",", ":")).encode()) + len((record.key or "").encode())
            slot = found.setdefault(record.topic, {}).setdefault(str(record.event.get("kind")), [0, 0])
            slot[0] += 1
            slot[1] += size
    return found


def _delta(counts: Counts, start: str, end: str, pods: int) -> dict[str, Any]:
    a, b = counts.marks[start], counts.marks[end]
    rows = {t: [round((b["tables"][t][i] - a["tables"][t][i]) / pods, 2) for i in range(3)] for t in TABLES}
    cpu = cpu_accounting.spent(a["cpu"], b["cpu"])
    return {"rows_per_pod": rows, "wal_bytes_per_pod": round((b["wal"] - a["wal"]) / pods),
            "cpu_ms_per_pod": {k: round(1000 * v / pods, 2) for k, v in cpu.items() if k != cpu_accounting.WALL},
            "wall_s": cpu.get(cpu_accounting.WALL)}


def markdown(report: dict[str, Any]) -> str:
    pods = report["pods"]
    lines = [f"# Records and rows per pod: {pods} pods on {report['nodes']} nodes, pending -> bound -> deleted", "",
             f"`{report['command']}`: one PipelineRun (services as processes) on a database of its own; rows from "
             "its pg_stat_user_tables (inserted / updated / deleted), records from the run's own topics (bytes: key "
             "and compact JSON). CPU: `service ...` rows are the run's own processes; kafka, postgres and the rest "
             "are whole servers, shared with anything else using them meanwhile. Way in: from before the submit "
             "until every pod was bound; way out: from then until placement recorded every pod deleted; each "
             "window also holds an 11 s idle wait (PostgreSQL's counters flushing).", "",
             "| table | way in: ins / upd / del per pod | way out (deleted): ins / upd / del per pod |",
             "|---|---|---|"]
    for t in TABLES:
        lines.append(f"| {t} | {' / '.join(map(str, report['in']['rows_per_pod'][t]))} | "
                     f"{' / '.join(map(str, report['out']['rows_per_pod'][t]))} |")
    lines += ["", f"WAL bytes per pod: way in {report['in']['wal_bytes_per_pod']}, way out "
              f"{report['out']['wal_bytes_per_pod']}.", "",
              f"Rows of the run's clusters once bound: {report['rows_by_cluster']}.", "",
              "| topic | kind | records per pod | bytes per record |", "|---|---|---|---|"]
    for topic, kinds in sorted(report["records"].items()):
        for kind, (n, size) in sorted(kinds.items()):
            lines.append(f"| {topic} | {kind} | {n / pods:.3f} | {size / n:.0f} |")
    lines += ["", "| component | CPU ms per pod, way in | way out |", "|---|---|---|"]
    for k in report["in"]["cpu_ms_per_pod"]:
        lines.append(f"| {k} | {report['in']['cpu_ms_per_pod'][k]} | {report['out']['cpu_ms_per_pod'].get(k)} |")
    return "\n".join(lines) + "\n"


async def _run(settings: Settings, config: RunConfig) -> tuple[Counts, RunResult]:
    """The run on a database of its own (its table counters are the run's alone), dropped afterwards."""
    async with scratch_databases(settings.database_url.get_secret_value(), 1) as (url,):
        settings = settings.model_copy(update={"database_url": SecretStr(url)})
        counts = Counts(url)
        result = await PipelineRun(config, settings).run(before_submit=counts.before, after_drain=counts.after)
    return counts, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--pods", type=int, default=400)
    parser.add_argument("--out", type=Path, default=Path("bench/results/pipeline-counts"))
    args = parser.parse_args()
    settings, kubeconfigs = local_stack()
    config = RunConfig(kubeconfigs=kubeconfigs, nodes=args.nodes, pods=args.pods, gpus_per_node=10, processes=True)
    counts, result = asyncio.run(_run(settings, config))
    bound = counts.rows_by_cluster["bound"]  # the run's own count reads the apiserver, where they are gone now
    report = {"command": f"python bench/pipeline_counts.py --nodes {args.nodes} --pods {args.pods} --out {args.out}",
              "nodes": args.nodes, "pods": bound, "run": result.summary(),
              "in": _delta(counts, "submit", "bound", bound), "out": _delta(counts, "bound", "deleted", bound),
              "rows_by_cluster": counts.rows_by_cluster,
              "records": counts.records}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    args.out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
