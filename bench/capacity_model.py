"""The capacity model's tables for docs/capacity.md, from the measured figures in bench/results.

    python bench/capacity_model.py --out bench/results/capacity-model.md

reads:
- `pipeline-vs-kube-scheduler.json`: gpuplace's CPU over a 2,000-pod burst on 200 nodes (services, Kafka,
  PostgreSQL; medians over the repeats), per pod bound: the way in (pending -> bound);
- `pipeline-counts.json` (bench/pipeline_counts.py): records and rows per pod, both ways, how the services' CPU
  splits between placement and the watcher, and what a pod's deletion (the way out) costs each component;
- `pg-capacity.json` and `pg-capacity-placing.json` (bench/pg_capacity.py): PostgreSQL's CPU per pod (its whole
  life, and its way in alone), per telemetry sample and per latency window with gpuplace's own transactions, the
  bytes each leaves in tables nothing prunes, and the WAL;
- `fleet-sim.json`: how many pods the fleet simulator's week starts per GPU (the everyday churn);
and applies gpuplace.sim.capacity to a fleet of 5 regions, 50 clusters and 50,000 GPUs at three pod rates.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from gpuplace.contracts.events import GpuTelemetry, LatencyWindow
from gpuplace.sim import capacity

RESULTS = Path("bench/results")
FLEET = capacity.Fleet(regions=5, clusters=50, gpus=50_000)
LIFETIME_S = 900.0  # the robotics scenario's mean pod lifetime (sim/scenarios/robotics.py): the busy day
BURST = 2_000  # pods per cluster, the pipeline bench's burst
PARTITIONS = (16, 64, 256)
KEPT = ("pods", "decisions", "outbox", "processed_events", "latency_windows")  # tables nothing prunes


def _load(name: str) -> Any:
    return json.loads((RESULTS / name).read_text())


def burst_ms_per_pod() -> dict[str, float]:
    """gpuplace's burst CPU per pod bound (ms), medians over the repeats: services, kafka, postgres."""
    runs = [r for r in _load("pipeline-vs-kube-scheduler.json")["runs"] if r["side"] == "gpuplace"]
    keys = {"services": "scheduler under test", "kafka": "kafka", "postgres": "postgres"}
    return {k: statistics.median(1000 * r["burst_cpu_s"][v] / r["pods_bound"] for r in runs) for k, v in keys.items()}


def everyday_pods_per_gpu_hour() -> float:
    """Pods the fleet simulator's week placed per GPU per hour (gpuplace, without defragmentation), mean of seeds."""
    found = []
    for summary in _load("fleet-sim.json")["summaries"]:
        if summary["policy"] == "gpuplace" and not summary["defrag"]:
            for seed in summary["by_seed"]:
                pods = sum(v["n"] for v in seed["fleet"]["pending"].values())
                found.append(pods / (seed["gpus_at_start"] * seed["days"] * 24))
    return statistics.mean(found)


def pod_costs(counts: dict[str, Any], pgcap: dict[str, Any], placing: dict[str, Any]
              ) -> tuple[capacity.Costs, capacity.Costs, dict[str, float]]:
    """A pod's way in and way out. Placement and the watcher: the burst's way in, split between them as the counted
    run's processes split it; the counted run's way out. Kafka: the burst's cost per record, times each way's
    records (the broker is shared, so the counted run's own Kafka figure is not the run's alone). PostgreSQL: the
    burst's way in; the way out is pg_capacity's whole life less its way in (`pods` less `placing`, medians, each
    on its own backends). Records, bytes, rows and WAL: the counted run, each way."""
    burst = burst_ms_per_pod()
    way_in, way_out = counts["in"]["cpu_ms_per_pod"], counts["out"]["cpu_ms_per_pod"]
    services_in = sum(v for k, v in way_in.items() if k.startswith("service "))
    share = {k: way_in.get(f"service {k}", 0.0) / services_in for k in ("placement", "cluster-watcher")}
    pods = counts["pods"]
    outward = {(t, k) for t, kinds in counts["records"].items() for k in kinds if k == "deleted"}
    records = {way: sum(n for t, kinds in counts["records"].items() for k, (n, _) in kinds.items()
                        if ((t, k) in outward) == (way == "out")) / pods for way in ("in", "out")}
    size = {way: sum(b for t, kinds in counts["records"].items() for k, (_, b) in kinds.items()
                     if ((t, k) in outward) == (way == "out")) / pods for way in ("in", "out")}
    per_record = burst["kafka"] / records["in"]
    life, placed = _median(pgcap, "pods"), _median(placing, "placing")
    postgres = {"in": burst["postgres"], "out": life["backends_ms_per"] - placed["backends_ms_per"]}
    kept = {"in": placed["kept"], "out": life["kept"] - placed["kept"]}
    costs = [capacity.Costs(placement_cpu_ms=burst["services"] * share["placement"] if way == "in" else
                   way_out.get("service placement", 0.0),
                   watcher_cpu_ms=burst["services"] * share["cluster-watcher"] if way == "in" else
                   way_out.get("service cluster-watcher", 0.0),
                   kafka_cpu_ms=per_record * records[way], postgres_cpu_ms=postgres[way], kafka_records=records[way],
                   kafka_bytes=size[way], postgres_rows=sum(sum(r) for r in counts[way]["rows_per_pod"].values()),
                   postgres_wal_bytes=counts[way]["wal_bytes_per_pod"], postgres_kept_bytes=kept[way])
             for way in ("in", "out")]
    seen = {"burst_services_ms": burst["services"], "placement_share": share["placement"],
            "pg_life_ms": life["backends_ms_per"], "pg_placing_ms": placed["backends_ms_per"]}
    return costs[0], costs[1], seen


def _median(pgcap: dict[str, Any], mix: str) -> dict[str, float]:
    """pg_capacity's runs of `mix`: the median of each figure over them (K = 1, 2, 4, split or not)."""
    runs = [r for r in pgcap["runs"] if r["mix"] == mix]
    figures = ("backends_ms_per", "client_ms_per", "wal_bytes_per")
    found = {f: statistics.median(r[f] for r in runs) for f in figures}
    found["kept"] = statistics.median(sum(r["table_bytes_per"].get(t, 0) for t in KEPT) for r in runs)
    return found


def sample_costs(pgcap: dict[str, Any], kafka_ms_per_record: float) -> tuple[capacity.Costs, capacity.Costs]:
    """A telemetry sample and a latency window: one record each; ingest's Python is pg_capacity's client side (the
    use case's own, without the Kafka consumer and validation the service adds: a floor)."""
    sample = GpuTelemetry(cluster="us-east-1-c01", node="node-001", gpu_index=3, gpu_uuid="GPU-" + "0" * 36,
                          model="NVIDIA-H100-80GB-HBM3", memory_total_mib=81_920, memory_used_mib=40_000,
                          utilization_pct=55.0)
    window = LatencyWindow(cluster="us-east-1-c01", namespace="perception", pod="detector-7d9f-abcde",
                           workload="detector", node="node-001", gpu_index=3, window_s=10.0, frames=300,
                           p50_ms=8.0, p95_ms=12.0, p99_ms=15.0, deadline_ms=33.3, co_runners=["perception/x"])
    found = []
    for event, mix, rows in ((sample, "telemetry", 2.0), (window, "latency", 3.0)):
        run = _median(pgcap, mix)
        found.append(capacity.Costs(ingest_cpu_ms=run["client_ms_per"], kafka_cpu_ms=kafka_ms_per_record,
                           postgres_cpu_ms=run["backends_ms_per"], kafka_records=1.0,
                           kafka_bytes=len(event.model_dump_json(by_alias=True)) + len(event.kafka_key()),
                           postgres_rows=rows, postgres_wal_bytes=run["wal_bytes_per"],
                           postgres_kept_bytes=run["kept"]))
    return found[0], found[1]


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def _n(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}" if x >= 1 else f"{x:.2f}" if x >= 0.01 else f"{x:.3f}"


def demand_table(got: dict[str, capacity.Demand]) -> list[str]:
    lines = [("pods started per s", "starts_per_s"), ("pods ended per s", "ends_per_s"),
             ("telemetry samples per s", "samples_per_s"), ("latency windows per s", "windows_per_s"),
             ("placement cores", "placement_cores"), ("cluster-watcher cores", "watcher_cores"),
             ("ingest cores (telemetry + latency)", "ingest_cores"), ("Kafka cores", "kafka_cores"),
             ("Kafka records per s", "kafka_records_per_s"), ("Kafka MB per s", "kafka_mb_per_s"),
             ("PostgreSQL cores", "postgres_cores"), ("PostgreSQL rows written per s", "postgres_rows_per_s"),
             ("PostgreSQL WAL MB per s", "postgres_wal_mb_per_s"),
             ("PostgreSQL GB a day into tables kept (unpruned)", "postgres_kept_gb_per_day")]
    rows = [[label] + [_n(getattr(d, key)) for d in got.values()] for label, key in lines]
    rows.append(["placement workers (each at most half a core)"] + [
        str(capacity.workers(d.placement_cores, busy=0.5, most=FLEET.clusters)) for d in got.values()])
    return _table(["fleet-wide", *got], rows)


def report(counts: dict[str, Any], pgcap: dict[str, Any], placing: dict[str, Any]) -> str:
    pod_in, pod_out, seen = pod_costs(counts, pgcap, placing)
    sample, window = sample_costs(pgcap, pod_in.kafka_cpu_ms / pod_in.kafka_records)
    work = capacity.Work(pod_in, pod_out, sample, window)
    churn = everyday_pods_per_gpu_hour()
    ceiling = capacity.per_cluster_pods_per_s(pod_in)
    busy = FLEET.running_pods / LIFETIME_S
    loads = {"everyday": (churn * FLEET.gpus / 3600, None), "busy day": (busy, None),
             "every cluster bursting": (FLEET.clusters * ceiling, busy)}
    costs = [["a pod's way in (pending -> bound)", pod_in], ["a pod's way out (deleted)", pod_out],
             ["a telemetry sample", sample], ["a latency window", window]]
    fields = ("placement_cpu_ms", "watcher_cpu_ms", "ingest_cpu_ms", "kafka_cpu_ms", "postgres_cpu_ms",
              "kafka_records", "kafka_bytes", "postgres_rows", "postgres_wal_bytes", "postgres_kept_bytes")
    lines = ["# Capacity model: 5 regions, 50 clusters, 50,000 GPUs", "",
             "`python bench/capacity_model.py` (gpuplace.sim.capacity over bench/results; docs/capacity.md says what "
             "each figure assumes).", "", "## Costs per unit, measured", ""]
    lines += _table(["unit", "placement ms", "watcher ms", "ingest ms", "Kafka ms", "PostgreSQL ms", "records",
                     "bytes on Kafka", "rows written", "WAL bytes", "bytes kept"],
                    [[name, *(_n(getattr(c, f)) for f in fields)] for name, c in costs])
    lines += ["", f"Inputs seen: {json.dumps({k: round(v, 3) for k, v in seen.items()})}; everyday churn "
              f"{churn:.3f} pods per GPU per hour (fleet simulator).", "", "## What the fleet needs", ""]
    lines += demand_table({name: capacity.demand(FLEET, work, *rates) for name, rates in loads.items()})
    lines += ["", "## Limits", "",
              f"- One cluster's burst drains at most at {_n(ceiling)} pods/s (one worker's core): {BURST:,} pods in "
              f"{capacity.drain_s(BURST, pod_in):.1f} s at best; a cluster's steady churn (in and out) at most "
              f"{_n(1000 / (pod_in.placement_cpu_ms + pod_out.placement_cpu_ms))} pods/s.",
              f"- One PostgreSQL core: {_n(1000 / (pod_in.postgres_cpu_ms + pod_out.postgres_cpu_ms))} pods/s (in and "
              f"out), or {_n(1000 / sample.postgres_cpu_ms)} telemetry samples/s, or "
              f"{_n(1000 / window.postgres_cpu_ms)} latency windows/s.",
              *_latency_row(pgcap),
              "- Workers that can have work, 50 clusters hashed over a topic's partitions: " + ", ".join(
                  f"{p} partitions: {capacity.partitions_holding(FLEET.clusters, p):.1f}" for p in PARTITIONS) + "."]
    return "\n".join(lines) + "\n"


def _latency_row(pgcap: dict[str, Any]) -> list[str]:
    """The one fleet-wide latency model row: how long a window holds it, and so the fleet's most windows a second."""
    runs = [r for r in pgcap["runs"] if r["mix"] == "latency" and "model_row_held_ms" in r]
    if not runs:
        return []
    alone = min(runs, key=lambda r: r["workers"])
    return [f"- The latency model row: each window holds it {alone['model_row_held_ms']} ms with one worker ("
            + ", ".join(f"{r['model_row_held_ms']} ms with {r['workers']}" for r in runs if r is not alone)
            + f"), so the fleet refits at most {_n(1000 / alone['model_row_held_ms'])} windows/s, however many "
            f"latency-ingest workers; the fleet sends {_n(FLEET.windows_per_s)}."]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=RESULTS / "capacity-model.md")
    args = parser.parse_args()
    text = report(_load("pipeline-counts.json"), _load("pg-capacity.json"), _load("pg-capacity-placing.json"))
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
