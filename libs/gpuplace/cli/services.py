"""`gpuplace service NAME`, `gpuplace up`, `gpuplace migrate`, `gpuplace topics`, `gpuplace docs`."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
from pathlib import Path

import typer
from faststream import FastStream
from faststream.specification import AsyncAPI

from gpuplace.adapters import dependencies
from gpuplace.adapters.kafka import broker_count, ensure_topics, make_broker
from gpuplace.adapters.postgres import migrate as migrations
from gpuplace.contracts import topics
from gpuplace.contracts.events import TOPIC_MODELS
from gpuplace.settings import KafkaAccess, Settings
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


def service_settings() -> Settings:
    """A service's settings: Kafka over SASL_SSL unless GPUPLACE_KAFKA_SECURITY_PROTOCOL says otherwise.

    The library's own default stays PLAINTEXT (a Settings() in a test or a tool), but a service that was given
    no protocol must not fall back to the one that lets anyone write any topic (issue 40): without
    GPUPLACE_KAFKA_USERNAME and GPUPLACE_KAFKA_PASSWORD it stops at start-up and names them."""
    if os.environ.get("GPUPLACE_KAFKA_SECURITY_PROTOCOL"):
        return Settings()
    return Settings(kafka_security_protocol="SASL_SSL")


def service(name: str = typer.Argument(..., help=f"one of: {', '.join(SERVICES)}")) -> None:
    """Run one service until SIGINT/SIGTERM."""
    if name not in SERVICES:
        raise typer.BadParameter(f"unknown service {name!r}; choose from {', '.join(SERVICES)}")
    settings = service_settings()
    runtime.configure_logging(settings.log_level, settings.log_format)
    runtime.run(runtime.serve({name: SERVICES[name]}, settings=settings), settings)


def up() -> None:
    """Run the pipeline's services together in one process (cluster-watcher, placement, ingest)."""
    settings = service_settings()
    runtime.configure_logging(settings.log_level, settings.log_format)
    _migrate(settings)
    asyncio.run(ensure_topics(settings.kafka, [settings.topic(t) for t in topics.ALL_TOPICS],
                              replication_factor=settings.topic_replication_factor))
    runtime.run(runtime.serve({n: SERVICES[n] for n in UP}, settings=settings), settings)


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
    replication_factor: int | None = typer.Option(None, min=0, help="replicas of each topic created (default: "
                                                  "GPUPLACE_TOPIC_REPLICATION_FACTOR; 3 on a production cluster); "
                                                  "0: as many as the cluster has brokers, at most 3"),
) -> None:
    """Create the topics that do not exist yet; existing ones are left as they are.

    A deployment runs it before the services (the Helm hook, compose's `topics` job; GPUPLACE_KAFKA_* and
    GPUPLACE_TOPIC_SUFFIX as the services), so no consumer starts on a topic the broker would auto-create with its
    own partition count."""
    settings = Settings()
    names = [settings.topic(t) for t in topics.ALL_TOPICS]
    factor = settings.topic_replication_factor if replication_factor is None else replication_factor
    asyncio.run(_ensure(settings, names, partitions, factor))
    typer.echo(f"topics present: {', '.join(names)}")


AUTO_REPLICATION_MAX = 3  # `--replication-factor 0`: what a production cluster's topics have, where it has 3 brokers


async def _ensure(settings: Settings, names: list[str], partitions: int, replication_factor: int) -> None:
    if replication_factor == 0:
        replication_factor = min(AUTO_REPLICATION_MAX, await broker_count(settings.kafka))
    await ensure_topics(settings.kafka, names, partitions=partitions, replication_factor=replication_factor)


DOC_SERVER = "127.0.0.1:29092"  # the local stack's broker: the document names no deployment's addresses
_DOC_DESCRIPTION = """\
The events gpuplace publishes on Kafka, one channel per topic, each message's payload a JSON object whose schema
is the pydantic model in gpuplace.contracts (the source of truth; `pip install` gpuplace and import
gpuplace.contracts to read them with the same models).

Record key: `<cluster>/<entity>`; every record of one cluster is on one partition of each topic (telemetry aside:
spread by the whole key), so a cluster's events are read in the order they were produced. Content type
application/json. `event_id` is the idempotency key: a consumer may see a record twice.

Schema evolution: adding an optional field keeps the topic and its `schema` version (1), so READERS MUST IGNORE
FIELDS THEY DO NOT KNOW (the payload schemas below therefore allow additional properties, although gpuplace's own
models refuse them when building an event). A breaking change (a field removed, renamed or retyped, a new enum
value) goes to a new topic version, e.g. gpuplace.placements.v2, published alongside v1 until its consumers have
moved. See README, "Subscribing to placements"."""


def asyncapi_document(server: str = DOC_SERVER) -> dict:
    """One AsyncAPI 3 document for every topic gpuplace reads or writes, generated from the contracts.

    docs/asyncapi.json is this document, checked in (a test keeps it current). Payload schemas drop the models'
    `additionalProperties: false`: that strictness is for gpuplace building events; a subscriber generating code
    from the document must ignore fields added later (the schema evolution rule)."""
    broker = make_broker(KafkaAccess(server))  # the document names the address; nothing connects
    for topic in topics.ALL_TOPICS:
        model = TOPIC_MODELS[topic]
        broker.publisher(topic, schema=model, title=topic, description=inspect.cleandoc(model.__doc__ or ""))
    paragraphs = ("\n\n".join(" ".join(p.split()) for p in _DOC_DESCRIPTION.split("\n\n")))  # no hard breaks
    app = FastStream(broker, specification=AsyncAPI(title="gpuplace events", version="1", description=paragraphs))
    document = json.loads(app.schema.to_specification().to_json())
    for schema in document.get("components", {}).get("schemas", {}).values():
        if schema.get("additionalProperties") is False:
            del schema["additionalProperties"]
    return document


def docs(out: Path = typer.Option(None, "--out", "-o", help="write the AsyncAPI JSON here instead of stdout"),
         server: str = typer.Option(DOC_SERVER, help="the Kafka bootstrap address the document names")) -> None:
    """Print (or write) the AsyncAPI 3 document of gpuplace's event contracts (docs/asyncapi.json)."""
    text = json.dumps(asyncapi_document(server), indent=2, sort_keys=True, ensure_ascii=False)
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
