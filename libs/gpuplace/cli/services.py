"""`gpuplace service NAME`, `gpuplace up`, `gpuplace migrate`, `gpuplace topics`, `gpuplace docs`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import typer
from faststream import FastStream
from faststream.specification import AsyncAPI

from gpuplace.adapters import dependencies
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
    runtime.configure_logging(settings.log_level, settings.log_format)
    asyncio.run(runtime.serve({name: SERVICES[name]}, settings=settings))


def up() -> None:
    """Run the pipeline's services together in one process (cluster-watcher, placement, ingest)."""
    settings = Settings()
    runtime.configure_logging(settings.log_level, settings.log_format)
    _migrate(settings)
    asyncio.run(ensure_topics(settings.kafka, [settings.topic(t) for t in topics.ALL_TOPICS],
                              replication_factor=settings.topic_replication_factor))
    asyncio.run(runtime.serve({n: SERVICES[n] for n in UP}, settings=settings))


def migrate(revision: str = typer.Argument("head", help="Alembic revision to upgrade to")) -> None:
    """Upgrade the PostgreSQL schema (GPUPLACE_DATABASE_URL) to REVISION."""
    _migrate(Settings(), revision)
    typer.echo(f"schema at {revision}")


def _migrate(settings: Settings, revision: str = "head") -> None:
    url = settings.database_url.get_secret_value()
    with dependencies.reaching(dependencies.postgres(url)):
        migrations.upgrade(url, revision)


def ensure(
    partitions: int = typer.Option(4, min=1, help="partitions of each topic created; placement scales out to this "
                                   "many workers, and needs one count on every topic it reads"),
    replication_factor: int | None = typer.Option(None, min=1, help="replicas of each topic created (default: "
                                                  "GPUPLACE_TOPIC_REPLICATION_FACTOR; 3 on a production cluster)"),
) -> None:
    """Create the topics that do not exist yet; existing ones are left as they are.

    A deployment runs it before the services (the Helm hook, compose's `topics` job; GPUPLACE_KAFKA_* and
    GPUPLACE_TOPIC_SUFFIX as the services), so no consumer starts on a topic the broker would auto-create with its
    own partition count."""
    settings = Settings()
    names = [settings.topic(t) for t in topics.ALL_TOPICS]
    asyncio.run(ensure_topics(settings.kafka, names, partitions=partitions,
                              replication_factor=replication_factor or settings.topic_replication_factor))
    typer.echo(f"topics present: {', '.join(names)}")


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
    app.command("topics")(ensure)
    app.command("docs")(docs)
