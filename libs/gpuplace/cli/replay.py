"""`gpuplace replay`: decide a cluster's recorded decisions again from its event log, or play a what-if.

The log comes from the topics (`--source kafka`, read as `gpuplace export` reads them) or from a file that
`gpuplace export` wrote. The engine is usecases/replay.py; this module reads the log, prints the comparison or
the side-by-side table, and writes the markdown report with its plots.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from dataclasses import asdict
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from gpuplace.adapters.event_log import BadLogLine, LogRecord, parse_time, read_lines
from gpuplace.adapters.kafka.event_log import read_known_cluster_log
from gpuplace.cli.console import new_console
from gpuplace.contracts import topics
from gpuplace.core.policies import registry
from gpuplace.settings import Settings
from gpuplace.usecases.decide import policy_options
from gpuplace.usecases.replay import Entry, ReplayResult, RunFigures, replay

SHOWN_DIFFERENCES = 5  # the first differences printed (all of them in --json and the report)
REPLAYED_TOPICS = [topics.NODES, topics.PODS, topics.LATENCY, topics.PLACEMENTS]


def entries_of(records: list[LogRecord]) -> list[Entry]:
    return [Entry(r.topic, r.timestamp, r.event) for r in records]


def load_log(source: str, cluster: str, end_ms: int | None, suffix: str | None) -> list[Entry]:
    """The cluster's records up to `end_ms` (from its beginning: the state at --from is rebuilt from them)."""
    if source == "kafka":
        settings = Settings()
        exported = asyncio.run(read_known_cluster_log(
            settings.kafka, cluster=cluster, topic_names=REPLAYED_TOPICS,
            suffix=settings.topic_suffix if suffix is None else suffix, end_ms=end_ms))
        if note := exported.trimmed_note():
            typer.echo(f"gpuplace replay: warning: {note}", err=True)
        return entries_of(exported.records)
    path = Path(source)
    if not path.is_file():
        raise typer.BadParameter(f"--source {source}: neither 'kafka' nor a file")
    with path.open(encoding="utf-8") as lines:
        try:
            records = read_lines(lines)
        except BadLogLine as exc:
            raise BadLogLine(f"{path}: {exc}") from None
    return [e for e in entries_of(records) if end_ms is None or e.timestamp_ms < end_ms]


def figures_row(label: str, figures: RunFigures) -> dict[str, Any]:
    pending = figures.pending_ms
    return {
        "run": label, "pods_placed": figures.pods_placed, "pods_waiting_at_end": figures.pods_waiting,
        "stranded_gpu_pct": figures.stranded_gpu_pct,
        "pending_ms_mean": statistics.fmean(pending) if pending else None,
        "pending_ms_p95": _percentile(pending, 95), "slo_attainment_pct": figures.slo_attainment_pct,
    }


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def _fmt(value: Any, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def comparison(result: ReplayResult) -> dict[str, Any]:
    return {
        "cluster": result.cluster, "policy": result.policy, "recorded_policy": result.recorded_policy,
        "compared": result.compared, "matched": result.matched, "differences": len(result.differences),
        "state_differences": result.state_differences, "skipped": result.skipped,
        "first_differences": [
            {"pod": d.pod, "at_ms": d.at_ms, "recorded": str(d.recorded), "replayed": str(d.replayed),
             "state_differed": d.state_differed} for d in result.differences],
    }


def print_comparison(console: Console, result: ReplayResult) -> None:
    verdict = "reproduced exactly" if not result.differences else f"{len(result.differences)} difference(s)"
    console.print(f"cluster {result.cluster}, policy {result.policy}: {result.compared} decision(s) decided again, "
                  f"{verdict}" + (f"; skipped: {result.skipped}" if result.skipped else ""))
    for d in result.differences[:SHOWN_DIFFERENCES]:
        state = {True: "the state differed", False: "same state", None: "no view digest recorded"}[d.state_differed]
        console.print(f"  {d.pod} at +{d.at_ms / 1000:.1f} s: recorded {d.recorded}, replayed {d.replayed} ({state})")


def what_if_table(recorded: ReplayResult, replayed: ReplayResult) -> list[dict[str, Any]]:
    return [figures_row(f"recorded ({recorded.policy})", recorded.replayed),
            figures_row(f"what-if ({replayed.policy})", replayed.replayed)]


def print_table(console: Console, rows: list[dict[str, Any]], title: str) -> None:
    table = Table(title=title)
    for column in rows[0]:
        table.add_column(column, justify="left" if column == "run" else "right", no_wrap=column == "run")
    for row in rows:
        table.add_row(*(_fmt(v) for v in row.values()))
    console.print(table)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    header = "| " + " | ".join(rows[0]) + " |\n|" + "---|" * len(rows[0]) + "\n"
    return header + "".join("| " + " | ".join(_fmt(v) for v in row.values()) + " |\n" for row in rows)


def write_report(path: Path, cluster: str, recorded: ReplayResult, replayed: ReplayResult | None) -> list[Path]:
    """A markdown report beside its plots (pods placed over time; time pending, as a CDF)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    runs = [(f"recorded ({recorded.policy})", recorded.replayed)]
    if replayed is not None:
        runs.append((f"what-if ({replayed.policy})", replayed.replayed))
    plots = [path.with_name(f"{path.stem}-placed.png"), path.with_name(f"{path.stem}-pending.png")]
    fig, ax = plt.subplots(figsize=(8, 3.5), dpi=110)
    for label, figures in runs:
        if figures.timeline:
            xs, ys = zip(*figures.timeline, strict=True)
            ax.step([x / 1000 for x in xs], ys, where="post", label=label)
    ax.set(xlabel="seconds since the range's start", ylabel="pods placed", title=f"{cluster}: pods placed")
    ax.grid(alpha=0.5)
    ax.legend()
    fig.savefig(plots[0], bbox_inches="tight")
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(8, 3.5), dpi=110)
    for label, figures in runs:
        values = sorted(v / 1000 for v in figures.pending_ms)
        if values:
            ax.step(values, [(i + 1) / len(values) for i in range(len(values))], where="post", label=label)
    ax.set(xlabel="seconds pending (first pending event -> decided)", ylabel="share of placed pods",
           title=f"{cluster}: time pending")
    ax.grid(alpha=0.5)
    ax.legend()
    fig.savefig(plots[1], bbox_inches="tight")
    plt.close(fig)
    lines = [f"# Replay of cluster {cluster}\n", f"Recorded policy: {recorded.recorded_policy}; "
             f"{recorded.compared} decision(s) decided again, {len(recorded.differences)} difference(s) "
             f"({recorded.state_differences} on a different state).\n"]
    for d in recorded.differences[:SHOWN_DIFFERENCES]:
        lines.append(f"- {d.pod} at +{d.at_ms / 1000:.1f} s: recorded {d.recorded}, replayed {d.replayed}\n")
    rows = what_if_table(recorded, replayed) if replayed else [figures_row(f"recorded ({recorded.policy})",
                                                                          recorded.replayed)]
    lines += ["\n## Side by side\n\n", markdown_table(rows), "\nStranded GPU: free GPU share the typical workload "
              "cannot use (DESIGN §6), % of the cluster's GPU, at the end of the range. SLO attainment comes from "
              "latency.v1 windows, so only the recorded run has one.\n\n"]
    lines += [f"![{p.stem}]({p.name})\n\n" for p in plots]
    path.write_text("".join(lines), encoding="utf-8")
    return plots


def replay_command(
    cluster: str = typer.Option(..., "--cluster", help="the cluster to replay"),
    start: str = typer.Option(None, "--from", help="compare decisions from this time on (ISO 8601 or ms since the "
                              "epoch); the state there is rebuilt from the log before it"),
    end: str = typer.Option(None, "--to", help="end of the range, exclusive; default: the log's end"),
    source: str = typer.Option("kafka", "--source", help="'kafka' (the stack's topics) or a file `gpuplace export` "
                               "wrote"),
    policy: str = typer.Option(None, "--policy", help="decide with this policy instead (a what-if); default: the "
                               "recorded one"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of tables"),
    report: Path = typer.Option(None, "--report", help="write a markdown report (and its PNG plots beside it)"),
    suffix: str = typer.Option(None, "--topic-suffix", help="the stack's topic suffix (default GPUPLACE_TOPIC_SUFFIX)"),
    margin: float = typer.Option(None, "--latency-margin", help="the latency margin placement ran with (default "
                                 "GPUPLACE_LATENCY_MARGIN)"),
) -> None:
    """Rebuild CLUSTER's state from its event log and decide each recorded decision again: with the recorded
    policy every decision must match (differences are listed); with --policy it is a what-if, side by side."""
    if policy is not None and policy not in registry.names():
        raise typer.BadParameter(f"unknown policy {policy!r}; known: {', '.join(registry.names())}")
    start_ms, end_ms = (parse_time(start) if start else None), (parse_time(end) if end else None)
    if start_ms is not None and end_ms is not None and end_ms <= start_ms:
        raise typer.BadParameter(f"--to ({end}) must be after --from ({start})")
    settings = Settings()
    latency_margin = settings.latency_margin if margin is None else margin
    try:  # decide again with the policy settings placement ran with (the same environment)
        options = policy_options(settings.expected_shapes, settings.whole_gpu_reserve)
    except ValueError as error:
        raise typer.BadParameter(f"GPUPLACE_EXPECTED_SHAPES: {error}") from None
    entries = load_log(source, cluster, end_ms, suffix)
    recorded = replay(cluster, entries, latency_margin=latency_margin, options=options, start_ms=start_ms)
    replayed = None
    if policy is not None and policy != recorded.recorded_policy:
        replayed = replay(cluster, entries, policy=policy, latency_margin=latency_margin, options=options,
                          start_ms=start_ms)
    plots = write_report(report, cluster, recorded, replayed) if report is not None else []
    if as_json:
        out: dict[str, Any] = {"replay": comparison(recorded)}
        if replayed is not None:
            out["what_if"] = what_if_table(recorded, replayed)
        if report is not None:
            out["report"] = [str(report), *map(str, plots)]
        typer.echo(json.dumps(out, indent=2, default=lambda o: asdict(o)))
        return
    console = new_console()
    print_comparison(console, recorded)
    if replayed is not None:
        print_table(console, what_if_table(recorded, replayed), f"{cluster}: recorded vs what-if")
    if report is not None:
        console.print(f"report: {report} (plots: {', '.join(map(str, plots))})")


def register(app: typer.Typer) -> None:
    app.command("replay")(replay_command)
