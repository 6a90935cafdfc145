"""`gpuplace export` and `gpuplace import`: a cluster's event log as JSON Lines (adapters/event_log.py's format), the
input of replay and offline analysis, and the way to take a postmortem to another stack."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import typer

from gpuplace.adapters.event_log import BadLogLine, parse_time, read_lines, topic_names, write_lines
from gpuplace.adapters.kafka.event_log import publish_log, read_known_cluster_log
from gpuplace.settings import Settings


def _note(text: str) -> None:
    print(f"gpuplace: {text}", file=sys.stderr, flush=True)


def export(
    cluster: str = typer.Option(..., "--cluster", help="the cluster whose events to export"),
    out: Path = typer.Option(..., "--out", "-o", help="the JSON Lines file to write ('-': stdout)"),
    start: str = typer.Option(None, "--from", help="first record time, inclusive: ISO 8601 (no zone: UTC) or ms "
                              "since the epoch; default: each topic's beginning"),
    end: str = typer.Option(None, "--to", help="end of the range, exclusive; default: now (each partition's end "
                            "offset when the export starts)"),
    topics_spec: str = typer.Option(None, "--topics", help="comma-separated topics: pods, nodes, telemetry, latency, "
                                    "placements, deadletter (or full names); default: all"),
    suffix: str = typer.Option(None, "--topic-suffix", help="the stack's topic suffix (default "
                               "GPUPLACE_TOPIC_SUFFIX)"),
    progress_every: int = typer.Option(10_000, min=1, help="report progress on stderr every this many records"),
) -> None:
    """Write CLUSTER's events of a time range as JSON Lines: one schema-tagged record a line, each partition in
    offset order, merged across topics by record timestamp."""
    settings = Settings()
    start_ms, end_ms = (parse_time(start) if start else None), (parse_time(end) if end else None)
    if start_ms is not None and end_ms is not None and end_ms <= start_ms:
        raise typer.BadParameter(f"--to ({end}) must be after --from ({start})")
    exported = asyncio.run(read_known_cluster_log(
        settings.kafka, cluster=cluster, topic_names=topic_names(topics_spec),
        suffix=settings.topic_suffix if suffix is None else suffix, start_ms=start_ms, end_ms=end_ms,
        progress=_note, progress_every=progress_every))
    if str(out) == "-":
        sys.stdout.writelines(write_lines(exported.records))
    else:
        partial = out.with_name(out.name + ".partial")  # never leave half a log under the name asked for
        with partial.open("w", encoding="utf-8") as file:
            file.writelines(write_lines(exported.records))
        os.replace(partial, out)
    if exported.absent_topics:
        _note(f"no such topic(s), nothing exported from them: {', '.join(exported.absent_topics)}")
    if note := exported.trimmed_note():
        _note(note)
    if exported.not_json:
        _note(f"left out {exported.not_json} record(s) that are not JSON objects (their dead letters are kept)")
    _note(f"exported {len(exported.records)} record(s) of cluster {cluster} to {out}")


def import_log(
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="a file `gpuplace export` wrote"),
    suffix: str = typer.Option(None, "--topic-suffix", help="publish to the topics with this suffix (default "
                               "GPUPLACE_TOPIC_SUFFIX)"),
    partitions: int = typer.Option(4, min=1, help="partitions of each topic the import has to create"),
    progress_every: int = typer.Option(10_000, min=1, help="report progress on stderr every this many records"),
) -> None:
    """Publish an exported log back to the topics of a stack, in order, with the same keys, partitioner and
    timestamps. The whole file is checked first: a file with a bad line publishes nothing."""
    settings = Settings()
    with file.open(encoding="utf-8") as lines:
        try:
            records = read_lines(lines)
        except BadLogLine as exc:
            raise BadLogLine(f"{file}: {exc}; nothing was published") from None
    sent = asyncio.run(publish_log(settings.kafka, records,
                                   suffix=settings.topic_suffix if suffix is None else suffix, partitions=partitions,
                                   replication_factor=settings.topic_replication_factor, progress=_note,
                                   progress_every=progress_every))
    _note(f"published {sent} record(s) from {file}")


def register(app: typer.Typer) -> None:
    app.command("export")(export)
    app.command("import")(import_log)
