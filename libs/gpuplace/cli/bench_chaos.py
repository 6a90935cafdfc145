"""`gpuplace bench chaos`: the pipeline under faults (issue 20), and whether correctness held.

Service processes SIGKILLed and restarted, Kafka and PostgreSQL restarted, a fuzz corpus of malformed records on
every consumed topic, while pods arrive and leave (chaos_run). The report is a pass/fail table of DESIGN §4/§5's
promises, with the evidence behind each line; a failure is something to reproduce, never a number to tune away.
"""

from __future__ import annotations

import asyncio
import json
import platform
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from gpuplace.cli import bench
from gpuplace.cli.console import new_console
from gpuplace.harness.chaos_run import ChaosConfig, ChaosResult, ChaosRun
from gpuplace.harness.stack_run import Keep, Nodes, PolicyName, local_stack, stage_bars
from services import runtime

DEFAULT_OUT = Path("bench/results/chaos.md")


def bench_chaos(
    kills: int = typer.Option(50, min=0, help="SIGKILLs of service processes (placement or a cluster-watcher)"),
    fuzz: int = typer.Option(5000, min=0, help="malformed records sent over every consumed topic"),
    pods: int = typer.Option(400, min=1, help="pods submitted over the faults phase (some deleted again)"),
    nodes: Nodes = 24,
    seed: int = typer.Option(7, help="seed of the fleet, pods, fuzz corpus and fault schedule"),
    kafka_restarts: int = typer.Option(1, min=0, help="Kafka restarts during the faults phase"),
    postgres_restarts: int = typer.Option(1, min=0, help="PostgreSQL restarts during the faults phase"),
    kill_interval_s: float = typer.Option(6.0, min=0.5, help="mean seconds between kills (sets the phase length)"),
    churn: float = typer.Option(0.15, min=0.0, max=1.0, help="share of pods deleted again soon after creation"),
    policy: PolicyName = None,
    timeout_s: float = typer.Option(3600.0, "--timeout", min=10.0, help="give up settling after this many seconds"),
    settle_s: float = typer.Option(90.0, min=5.0, help="after the faults, report once nothing moved this long"),
    run_dir: Path | None = typer.Option(None, help="where the service logs go (default: a temporary directory)"),
    out: Path = typer.Option(DEFAULT_OUT, help="markdown report (a .json with every figure beside it)"),
    keep: Keep = False,
) -> None:
    """Run the pipeline under faults and fuzz on the local stack; exit 1 if an invariant broke."""
    settings, kubeconfigs = local_stack()
    runtime.configure_logging("WARNING")  # aiokafka's reconnect lines through the restarts: one per 10 s
    config = ChaosConfig(kubeconfigs=kubeconfigs, nodes=nodes, pods=pods, kills=kills, fuzz=fuzz, seed=seed,
                         kafka_restarts=kafka_restarts, postgres_restarts=postgres_restarts,
                         kill_interval_s=kill_interval_s, churn=churn, policy=policy, timeout_s=timeout_s,
                         settle_s=settle_s, run_dir=run_dir, keep=keep)
    console = new_console(stderr=True)
    console.print(f"chaos run {config.run_id}: faults phase {config.phase_s:.0f} s; service logs in "
                  f"{(run_dir or 'a temporary directory')}")
    result = run_with_progress(config, settings, console)
    report = markdown(result)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report)
    out.with_suffix(".json").write_text(json.dumps(result.to_json(), indent=2, default=str) + "\n")
    print_summary(new_console(), result)
    console.print(f"report: {out} and {out.with_suffix('.json')}; service logs: {result.run_dir}")
    if not result.passed:
        raise typer.Exit(1)


def run_with_progress(config: ChaosConfig, settings: Any, console: Console) -> ChaosResult:
    """The run, with one progress bar per stage (nodes, pods, kills, fuzz, settle, ...)."""
    with stage_bars(console, width=14) as progress:
        try:
            return asyncio.run(ChaosRun(config, settings, progress).run())
        except (OSError, TimeoutError, RuntimeError) as exc:
            console.print(f"[red]chaos run failed:[/red] {exc}")
            raise typer.Exit(2) from exc


def summary_rows(result: ChaosResult) -> list[tuple[str, str, str]]:
    """(invariant, verdict, evidence): the table the console and the markdown both show."""
    p, f, c = result.pods, result.fuzz, result.canaries
    inv = result.invariants
    worst = max((v["longest_stall_s"] for v in result.stalls.values()), default=0.0)
    verdict = {True: "ok", False: "FAILED"}
    return [
        ("no pod lost", verdict[inv["no pod lost"]],
         f"{p['lost']} lost of {p['live']} live ({p['bound']} bound, {p['waiting']} waiting with a reason; "
         f"{p['submitted']} submitted, {p['deleted_by_churn']} deleted by churn)"),
        ("no pod bound twice", verdict[inv["no pod bound twice"]],
         f"{result.bound_twice} with two bound decisions, {len(result.node_mismatch)} on another node in PostgreSQL"),
        ("no GPU over-committed", verdict[inv["no GPU over-committed"]],
         f"{result.gpus_overcommitted['postgres']} by PostgreSQL allocations, "
         f"{result.gpus_overcommitted['apiservers']} by the pods' GPU assignments"),
        ("every fuzz record dead-lettered", verdict[inv["every fuzz record dead-lettered"]],
         f"{f['dead_lettered']} of {f['sent']} ({f['dead_letter_copies']} dead letters; "
         f"{len(result.other_dead_letters)} other dead letters)"),
        ("no partition stalled", verdict[inv["no partition stalled"]],
         f"longest stall {worst:.1f} s (limit {result.config['stall_threshold_s']:.0f} s); canaries stored "
         f"{c['stored']} of {c['sent']}, slowest {max(c['slowest_s_by_cluster'].values(), default=0.0):.1f} s"),
    ]


def print_summary(console: Console, result: ChaosResult) -> None:
    table = Table(title=f"gpuplace bench chaos (run {result.run_id}): {'PASSED' if result.passed else 'FAILED'}")
    for column in ("invariant", "", "evidence"):
        table.add_column(column)
    for row in summary_rows(result):
        table.add_row(*row)
    console.print(table)
    console.print(f"faults: kills {result.faults['kills']}, restarts {_restarts(result)}, "
                  f"unexpected exits {len(result.faults['unexpected_exits'])}; {result.seconds:.0f} s")


def _restarts(result: ChaosResult) -> str:
    items = [f"{r['component']} at {r['at_s']:.0f} s " + (f"({r['seconds']:.0f} s away)" if "seconds" in r
                                                          else f"(FAILED: {r['error']})")
             for r in result.faults["restarts"]]
    return ", ".join(items) or "none"


def _kill_times(result: ChaosResult) -> str:
    return ", ".join(f"{k['service']} @{k['at_s']}" for k in result.faults["kill_log"]) or "none"


def _last_line(text: str) -> str:
    lines = [line.strip(" │╰─╯") for line in text.splitlines() if line.strip(" │╰─╯")]
    return " ".join(lines[-2:])[:200].replace("`", "'")


def markdown(result: ChaosResult) -> str:
    cfg = result.config
    command = (f"gpuplace bench chaos --kills {cfg['kills']} --fuzz {cfg['fuzz']} --pods {cfg['pods']} "
               f"--nodes {cfg['nodes']} --seed {cfg['seed']} --kafka-restarts {cfg['kafka_restarts']} "
               f"--postgres-restarts {cfg['postgres_restarts']}")
    lines = [
        f"# Chaos benchmark: {'PASSED' if result.passed else 'FAILED'}", "",
        f"`{command}` on {platform.node()} ({platform.processor() or platform.machine()}), run {result.run_id}, "
        f"{len(result.clusters)} clusters, faults phase {cfg['phase_s']:.0f} s, {result.seconds:.0f} s in all.", "",
        "| invariant | | evidence |", "|---|---|---|",
        *(f"| {a} | {b} | {c} |" for a, b, c in summary_rows(result)), "",
        "## Faults", "",
        f"- kills (SIGKILL, restarted after {cfg['restart_delay_s'][0]}-{cfg['restart_delay_s'][1]} s): "
        f"{result.faults['kills']}",
        f"- Kafka / PostgreSQL restarts: {_restarts(result)}",
        f"- kills, at seconds since the run began: {_kill_times(result)}",
        f"- service starts: {result.faults['service_starts']}",
        f"- unexpected exits (a service died without being killed): {len(result.faults['unexpected_exits'])}",
        *(f"  - `{e['service']}` exit {e['code']} at {e['at_s']} s: `{_last_line(e['error'])}`"
          for e in result.faults["unexpected_exits"]),
        "", "## Fuzz corpus", "",
        f"- sent by kind: {result.fuzz['by_kind']}",
        f"- not dead-lettered by kind: {result.fuzz['missing_by_kind'] or 'none'}; by topic: "
        f"{result.fuzz['missing_by_topic'] or 'none'}",
        *(f"  - record {m['index']} ({m['kind']}, {m['topic']}, key `{m['key']}`)"
          for m in result.fuzz["missing_first"]),
        f"- other dead letters (originals the bench did not send): {len(result.other_dead_letters)}",
        *(f"  - {d['source_topic']} by {d['consumer']}: {d['reason'][:160]}" for d in result.other_dead_letters),
        "", "## Partitions", "",
        "| partition (consumer group) | longest stall s | max lag |", "|---|---|---|",
        *(f"| {k} | {v['longest_stall_s']} | {v['max_lag']} |" for k, v in result.stalls.items()), "",
        f"Canaries (pod events with a request error, one per cluster per second on the pods partitions): "
        f"{result.canaries['stored']} of {result.canaries['sent']} stored; slowest acknowledged-to-stored by "
        f"cluster, less the time Kafka itself was away: {result.canaries['slowest_s_by_cluster']} (with it: "
        f"{result.canaries.get('slowest_raw_s_by_cluster', {})}). Partition stalls above likewise leave out the "
        "Kafka restarts' own downtime.", "",
        "## Also worth a look (not invariants)", "",
        *(f"- {k}: {v}" for k, v in result.info.items()),
        *([f"- lost pods: {', '.join(result.lost)}"] if result.lost else []),
        *([f"- node mismatches: {', '.join(result.node_mismatch)}"] if result.node_mismatch else []),
        "", "How to read this: bench/README.md, section \"Chaos\".", "",
    ]
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    bench.bench_app.command("chaos")(bench_chaos)
