"""`gpuplace service NAME`, `gpuplace up`, `gpuplace migrate`, `gpuplace docs`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import typer
from faststream import FastStream
from faststream.specification import AsyncAPI

from gpuplace.adapters.kafka import ensure_topics, make_broker
from gpuplace.adapters.postgres import migrate as migrations
from gpuplace.contracts import topics
from gpuplace.contracts.events import TOPIC_MODELS
from gpuplace.settings import Settings
from services import runtime
from services.cluster_watcher import app as cluster_watcher
from services.gpu_agent import app as gpu_agent
from services.latency_ingest import app as latency_ingest
from services.placement import app as placement
from services.telemetry_ingest import app as telemetry_ingest

SERVICES: dict[str, runtime.Service] = {
    "cluster-watcher": cluster_watcher.run,
    "placement": placement.run,
    "telemetry-ingest": telemetry_ingest.run,
    "latency-ingest": latency_ingest.run,
    "gpu-agent": gpu_agent.run,
}
# What `gpuplace up` starts on one machine (gpu-agent runs on GPU nodes, as a DaemonSet).
UP = ("cluster-watcher", "placement", "telemetry-ingest", "latency-ingest")


def service(name: str = typer.Argument(..., help=f"one of: {', '.join(SERVICES)}")) -> None:
    """Run one service until SIGINT/SIGTERM."""
    if name not in SERVICES:
        raise typer.BadParameter(f"unknown service {name!r}; choose from {', '.join(SERVICES)}")
    settings = Settings()
    runtime.configure_logging(settings.log_level)
    asyncio.run(runtime.serve({name: SERVICES[name]}, settings=settings))


def up() -> None:
    """Run the pipeline's services together in one process (cluster-watcher, placement, ingest)."""
    settings = Settings()
    runtime.configure_logging(settings.log_level)
    migrations.upgrade(settings.database_url.get_secret_value())
    asyncio.run(ensure_topics(settings.kafka, [settings.topic(t) for t in topics.ALL_TOPICS]))
    asyncio.run(runtime.serve({n: SERVICES[n] for n in UP}, settings=settings))


def migrate(revision: str = typer.Argument("head", help="Alembic revision to upgrade to")) -> None:
    """Upgrade the PostgreSQL schema (GPUPLACE_DATABASE_URL) to REVISION."""
    migrations.upgrade(Settings().database_url.get_secret_value(), revision)
    typer.echo(f"schema at {revision}")


def asyncapi_document() -> dict:
    """One AsyncAPI 3 document for every topic gpuplace reads or writes, generated from the contracts."""
    broker = make_broker(Settings().kafka)
    for topic in topics.ALL_TOPICS:
        model = TOPIC_MODELS[topic]
        broker.publisher(topic, schema=model, title=topic, description=(model.__doc__ or "").strip())
    app = FastStream(broker, specification=AsyncAPI(title="gpuplace events", version="1"))
    return json.loads(app.schema.to_specification().to_json())


def docs(out: Path = typer.Option(None, "--out", "-o", help="write the AsyncAPI JSON here instead of stdout")) -> None:
    """Print (or write) the AsyncAPI document of gpuplace's event contracts."""
    text = json.dumps(asyncapi_document(), indent=2)
    if out:
        out.write_text(text + "\n")
        typer.echo(f"wrote {out}")
    else:
        typer.echo(text)


def register(app: typer.Typer) -> None:
    app.command("service")(service)
    app.command("up")(up)
    app.command("migrate")(migrate)
    app.command("docs")(docs)
