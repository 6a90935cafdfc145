"""`gpuplace report --fleet` on the real stack after a pipeline run (what `gpuplace demo` runs): two clusters in two
regions, more pods than their GPUs take (some wait), latency windows through Kafka and latency-ingest. The report's
figures match the PostgreSQL rows, the run's exported log gives the same figures, and the page renders."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from typer.testing import CliRunner

from gpuplace.adapters.event_log import merge, write_lines
from gpuplace.adapters.kafka import client_options, cluster_partitioner
from gpuplace.adapters.kafka.event_log import read_cluster_log
from gpuplace.bootstrap import database
from gpuplace.cli import app as cli
from gpuplace.contracts import topics
from gpuplace.contracts.events import LatencyWindow
from gpuplace.harness.pipeline_run import PipelineRun, RunConfig
from gpuplace.harness.stack_env import cluster_kubeconfigs
from gpuplace.settings import Settings
from tests.integration.conftest import eventually

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

NODES, PODS = 2, 240  # 8 GPUs per cluster: the robotics stream asks more GPU memory than they have, so some wait
WINDOWS = ((20.0, 0), (30.0, 2), (45.0, 9))  # (p95 ms, deadline misses) of each cluster's three slam windows


async def _report(database_url: str, *args: str) -> str:
    cli._register_all()
    result = await asyncio.to_thread(CliRunner().invoke, cli.app, ["report", "--fleet", *args],
                                     env={"GPUPLACE_DATABASE_URL": database_url})
    assert result.exit_code == 0, result.output
    return result.output


async def _send_windows(run: PipelineRun, bootstrap: str) -> None:
    """Before the pods: three windows per cluster, through the run's latency topic, stored by latency-ingest."""
    producer = AIOKafkaProducer(**client_options(bootstrap), partitioner=cluster_partitioner)  # as gpu-agent's
    await producer.start()
    try:
        for cluster in run.clusters:
            for i, (p95, misses) in enumerate(WINDOWS):
                window = LatencyWindow(cluster=cluster, namespace=run.namespace, pod=f"slam-{i}", workload="slam",
                                       window_s=10, frames=100, p50_ms=p95 / 2, p95_ms=p95, p99_ms=p95 + 5,
                                       deadline_ms=40.0, deadline_misses=misses)
                await producer.send_and_wait(topics.LATENCY + run.suffix, window.model_dump_json(by_alias=True)
                                             .encode(), key=window.kafka_key())
    finally:
        await producer.stop()
    async with database(run.settings) as uow_factory:
        async def stored() -> bool:
            async with uow_factory() as uow:
                found = [await uow.latency.latency_by_workload(c) for c in run.clusters]
            return all(rows and rows[0]["windows"] == len(WINDOWS) for rows in found)
        await eventually(stored, timeout_s=60, what="the latency windows in PostgreSQL")


async def _database_figures(settings: Settings, cluster: str) -> dict[str, Any]:
    """What the rows say, read here without the report's code."""
    async with database(settings) as uow_factory, uow_factory() as uow:
        nodes = await uow.nodes.load_nodes(cluster)
        gpus = await uow.nodes.load_gpus(cluster)
        waiting = [p for p in await uow.pods.pods_in_state(cluster, ("pending", "unschedulable")) if p["managed"]]
        holding = await uow.pods.pods_in_state(cluster, ("reserved", "bound", "promised"))
    return {"region": {n["region"] for n in nodes}, "nodes": len(nodes), "gpus": len(gpus),
            "gpu_memory_mib": sum(g["memory_total_mib"] for g in gpus),
            "gpu_memory_allocated_mib": sum(g["memory_assigned_mib"] for g in gpus),
            "waiting": len(waiting), "pods_placed": len(holding)}


async def test_the_fleet_report_after_a_pipeline_run_matches_the_database_and_the_log(
        kafka_bootstrap: str, database_url: str, tmp_path: Path) -> None:
    kubeconfigs = cluster_kubeconfigs()
    assert len(kubeconfigs) >= 2, f"the fleet report test needs two clusters, the stack has {list(kubeconfigs)}"
    names = list(kubeconfigs)[:2]
    regions = {names[0]: "us-east", names[1]: "eu-west"}
    settings = Settings(kafka_bootstrap=kafka_bootstrap, database_url=database_url)
    run = PipelineRun(RunConfig(kubeconfigs={n: kubeconfigs[n] for n in names}, nodes=NODES, pods=PODS, keep=True,
                                regions=regions, timeout_s=600), settings)
    try:
        result = await run.run(before_submit=lambda r: _send_windows(r, kafka_bootstrap))
        assert result.pods_bound > 0 and result.pods_unschedulable > 0, result.summary()
        clusters = ",".join(run.clusters)

        # from PostgreSQL: the rows' figures, per cluster, and the regions the watchers stamped
        figures = json.loads(await _report(database_url, "--cluster", clusters, "--json"))
        by_cluster = {c["cluster"]: c for c in figures["clusters"]}
        assert sorted(by_cluster) == sorted(run.clusters)
        for cluster, apiserver in run.clusters.items():
            rows, got = await _database_figures(settings, cluster), by_cluster[cluster]
            assert rows["region"] == {got["region"]} == {regions[apiserver]}
            assert (got["nodes"], got["gpus"], got["gpu_memory_mib"], got["gpu_memory_allocated_mib"],
                    sum(got["pods_waiting"].values()), got["pods_placed"]) == \
                (rows["nodes"], rows["gpus"], rows["gpu_memory_mib"], rows["gpu_memory_allocated_mib"],
                 rows["waiting"], rows["pods_placed"])
            assert got["gpu_memory_stranded_mib"] is not None
            assert 0 <= got["gpu_memory_stranded_mib"] <= got["gpu_memory_mib"] - got["gpu_memory_allocated_mib"]
            (slam,) = got["latency"]
            assert (slam["windows"], slam["frames"], slam["deadline_misses"]) == (3, 300, 11)
            assert slam["worst_p95_ms"] == 45.0 and slam["slo_attainment"] == pytest.approx(289 / 300)
        assert figures["fleet"]["pods_waiting"] == result.pods_unschedulable
        assert {r["name"] for r in figures["regions"]} == {"us-east", "eu-west"}
        assert any(why.startswith("unschedulable: ") for c in by_cluster.values() for why in c["pods_waiting"])

        # from the run's log, exported as `gpuplace export` does: the same state, so the same figures
        exported = [await read_cluster_log(settings.kafka, cluster=c, topic_names=topics.ALL_TOPICS,
                                           suffix=run.suffix) for c in run.clusters]
        log = tmp_path / "fleet.jsonl"
        log.write_text("".join(write_lines(merge([e.records for e in exported]))), encoding="utf-8")
        replayed = json.loads(await _report(database_url, "--log", str(log), "--json"))
        again = {c["cluster"]: c for c in replayed["clusters"]}
        for cluster, got in by_cluster.items():
            keys = ("region", "nodes", "gpus", "gpus_in_use", "gpu_memory_mib", "gpu_memory_allocated_mib",
                    "pods_placed", "pods_waiting")
            assert {k: again[cluster][k] for k in keys} == {k: got[k] for k in keys}
            assert again[cluster]["gpu_memory_stranded_mib"] == pytest.approx(got["gpu_memory_stranded_mib"])
            assert again[cluster]["latency"] == got["latency"]

        # the page
        page = tmp_path / "fleet.html"
        out = await _report(database_url, "--cluster", clusters, "-o", str(page))
        assert f"wrote {page} (2 cluster(s)" in out
        body = page.read_text(encoding="utf-8")
        assert body.count('src="data:image/png;base64,') == 3 and all(c in body for c in run.clusters)
    finally:
        await run.cleanup()
