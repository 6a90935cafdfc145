"""`gpuplace report --fleet [--log FILE [--policy P] | --input F.json] [-o report.html] [--json]`.

Per region and cluster: GPUs, GPU memory allocated and stranded, SLO attainment, p95 per workload and the pods
that wait and why, as one self-contained HTML page (cli/report_page.py) or, with `--json`, one JSON object with
the same figures. The figures come from the fleet state in PostgreSQL (GPUPLACE_DATABASE_URL), from an event log
`gpuplace export` wrote (replayed as recorded, or with `--policy` as a what-if), or from a report's own JSON
(`--input`: how a simulated run is rendered once put in that shape).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import NoReturn

import typer

from gpuplace.bootstrap import database
from gpuplace.cli.replay import entries_of
from gpuplace.cli.report_page import render
from gpuplace.core.policies import registry
from gpuplace.settings import Settings
from gpuplace.usecases.fleet_report import FleetReport
from gpuplace.usecases.fleet_sources import from_database, from_log


def register(app: typer.Typer) -> None:
    app.command("report")(report_command)


def report_command(
    fleet: bool = typer.Option(False, "--fleet", help="The whole fleet, per region and cluster (the only "
                                                      "report there is today)."),
    log: Path | None = typer.Option(None, "--log", help="An event log `gpuplace export` wrote, instead of "
                                                        "the database: the state it leaves each cluster in."),
    policy: str | None = typer.Option(None, "--policy", help="With --log: replay with this policy's own "
                                                             "decisions (a what-if) instead of the recorded ones."),
    input_json: Path | None = typer.Option(None, "--input", help="A report's JSON (--json's output, or a "
                                                                 "simulated run put in that shape) to render."),
    cluster: str | None = typer.Option(None, "--cluster", help="Only these clusters (comma-separated)."),
    output: Path = typer.Option(Path("report.html"), "--output", "-o", help="The HTML page to write."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as one JSON object; no page."),
) -> None:
    """The fleet report: GPUs, GPU memory allocated and stranded, SLO attainment, p95 per workload and pods
    waiting, per region and cluster, with plots, as one HTML page."""
    if not fleet:
        _fail("say which report: --fleet (the only one today)")
    if log is not None and input_json is not None:
        _fail("--log and --input are two sources: give one")
    if policy is not None and log is None:
        _fail("--policy replays a log: it needs --log")
    if policy is not None and policy not in registry.names():
        _fail(f"--policy {policy!r}: not a policy; one of {', '.join(registry.names())}")
    clusters = [c.strip() for c in (cluster or "").split(",") if c.strip()]
    report = _read(log, policy, input_json, clusters)
    if as_json:
        typer.echo(json.dumps(report.as_json(), indent=2))
        return
    output.write_text(render(report), encoding="utf-8")
    fleet_totals = report.fleet()
    typer.echo(f"wrote {output} ({fleet_totals.clusters} cluster(s), {fleet_totals.gpus} GPU(s), "
               f"{fleet_totals.pods_waiting} pod(s) waiting)")


def _read(log: Path | None, policy: str | None, input_json: Path | None, clusters: list[str]) -> FleetReport:
    if input_json is not None:
        try:
            report = FleetReport.from_json(json.loads(input_json.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError) as exc:
            _fail(f"--input {input_json}: {exc}")
        if clusters:
            report.clusters = [c for c in report.clusters if c.cluster in clusters]
        return report
    if log is not None:
        from gpuplace.adapters.event_log import read_lines

        if not log.is_file():
            _fail(f"--log {log}: no such file")
        with log.open(encoding="utf-8") as lines:
            records = read_lines(lines)  # a bad line: BadLogLine names its number
        return from_log(entries_of(records), source=f"log {log}", policy=policy, clusters=clusters)
    return asyncio.run(_from_database(Settings(), clusters))


async def _from_database(settings: Settings, clusters: list[str]) -> FleetReport:
    async with database(settings) as uow_factory:
        return await from_database(uow_factory, clusters)


def _fail(message: str) -> NoReturn:
    print(f"gpuplace: error: {message}", file=sys.stderr)
    raise typer.Exit(1)


__all__ = ["register"]
