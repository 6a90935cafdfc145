"""Follow one namespace's placements: what gpuplace decided about its pods, where they were bound, why they wait.

    python -m examples.placement_subscriber --namespace robots [--group robots-placements]
        [--from-offset earliest|latest|N | --from-time 2026-12-01T10:00:00Z] [--bootstrap HOST:PORT]

A team runs it as it is, or copies it and replaces `print_placement` with what it does with a placement (page
someone on `unschedulable`, record bind latency, ...). It depends on FastStream and gpuplace.contracts only.

Why it is written this way:
* Its own consumer group (`--group`, default `<namespace>-placements`): gpuplace's services never see it, and a
  restarted subscriber resumes after the last placement it handled (AckPolicy.ACK: a record's offset is committed
  after its handler ran; one that raised is logged by FastStream and skipped, so a bad one does not stop the
  stream; a crash mid-handler reads it again: handle placements idempotently, by `event_id`).
* Where to start: `--from-offset earliest|latest` is where a NEW group starts (a group that committed resumes);
  `--from-offset N` or `--from-time T` seek every partition there at start, whatever the group committed (to
  re-read a day, say).
* The placements topic is partitioned by cluster, not namespace: the subscriber reads every partition and keeps
  its namespace's events. A busy fleet's other namespaces cost only the read.
* It reads each record with contracts.read_event, which ignores fields it does not know: when gpuplace adds an
  optional field to PlacementEvent (the schema evolution rule), this subscriber keeps working unchanged. A
  breaking change would come on gpuplace.placements.v2, published alongside v1 for the switch.
* A record that is not a valid v1 placement is logged and skipped, never fatal.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import logging
import os
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiokafka import ConsumerRebalanceListener, TopicPartition
from faststream import AckPolicy, FastStream
from faststream.kafka import KafkaBroker
from faststream.kafka.annotations import KafkaMessage
from faststream.message import StreamMessage
from faststream.security import BaseSecurity, SASLPlaintext, SASLScram256, SASLScram512
from pydantic import ValidationError

from gpuplace.contracts import PlacementEvent, read_event, topics

log = logging.getLogger("placement_subscriber")
Handler = Callable[[PlacementEvent], Awaitable[None] | None]


@dataclass(frozen=True)
class Options:
    bootstrap: str
    namespace: str
    group: str
    from_offset: str = "latest"  # earliest | latest | a number
    from_time: datetime | None = None
    topic: str = topics.PLACEMENTS


def print_placement(event: PlacementEvent) -> None:
    """The default handler: one line a placement."""
    gpus = f" gpus {[g.index for g in event.gpus]}" if event.gpus else ""
    where = f" on {event.node}{gpus}" if event.node else ""
    why = f" ({'; '.join(f'{k}: {v}' for k, v in event.reasons.items())})" if event.reasons else ""
    print(f"{event.occurred_at:%Y-%m-%dT%H:%M:%S}Z {event.cluster} {event.namespace}/{event.pod} "
          f"{event.kind}{where}{why}", flush=True)


class StartAt(ConsumerRebalanceListener):
    """Seeks each partition, the first time this process is given it, to `--from-offset N` or `--from-time T`;
    later rebalances leave the positions to the group's commits."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.subscriber: Any = None  # FastStream's subscriber; its `consumer` is the started AIOKafkaConsumer
        self._started: set[TopicPartition] = set()

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        pass

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        new = sorted(set(assigned) - self._started, key=lambda tp: tp.partition)
        self._started |= set(new)
        consumer = self.subscriber.consumer
        if not new or consumer is None:
            return
        if self.options.from_time is not None:
            at = int(self.options.from_time.timestamp() * 1000)
            found = await consumer.offsets_for_times(dict.fromkeys(new, at))
            ends = await consumer.end_offsets(new)
            for tp in new:
                consumer.seek(tp, found[tp].offset if found.get(tp) else ends[tp])
        elif self.options.from_offset.isdigit():
            for tp in new:
                consumer.seek(tp, int(self.options.from_offset))  # past the end: the reset policy applies


async def _raw(msg: StreamMessage[Any]) -> bytes:
    """The record's bytes: read_event parses them (FastStream's own JSON decoding would only be parsed again)."""
    return bytes(msg.body)


def kafka_security(env: Mapping[str, str] = os.environ) -> BaseSecurity | None:
    """TLS and SASL as gpuplace's services read them (GPUPLACE_KAFKA_SECURITY_PROTOCOL, _SASL_MECHANISM, _USERNAME,
    _PASSWORD, _CA_FILE): a subscriber logs in as a user of its own, one that may only read (the local stack's
    `subscriber`; README, "Security"). None for PLAINTEXT."""
    protocol = env.get("GPUPLACE_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT")
    tls = ssl.create_default_context(cafile=env.get("GPUPLACE_KAFKA_CA_FILE")) if protocol.endswith("SSL") else None
    if not protocol.startswith("SASL_"):
        return BaseSecurity(ssl_context=tls, use_ssl=True) if tls else None
    sasl = {"PLAIN": SASLPlaintext, "SCRAM-SHA-256": SASLScram256, "SCRAM-SHA-512": SASLScram512}
    return sasl[env.get("GPUPLACE_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")](
        env.get("GPUPLACE_KAFKA_USERNAME", ""), env.get("GPUPLACE_KAFKA_PASSWORD", ""), ssl_context=tls,
        use_ssl=tls is not None)


def build(options: Options, handle: Handler = print_placement) -> FastStream:
    """The FastStream application: `await app.run()` from a program, or `broker = app.broker; await
    broker.start()` to embed it (as the test does)."""
    broker = KafkaBroker(options.bootstrap, client_id=f"placements-{options.namespace}", security=kafka_security())
    start_at = StartAt(options)
    subscriber = broker.subscriber(
        options.topic, group_id=options.group, ack_policy=AckPolicy.ACK, decoder=_raw,
        auto_offset_reset="earliest" if options.from_offset == "earliest" else "latest", listener=start_at,
        title=f"placements of namespace {options.namespace}")
    start_at.subscriber = subscriber

    @subscriber
    async def on_placement(msg: KafkaMessage) -> None:
        try:
            event = read_event(PlacementEvent, bytes(msg.body))
        except ValidationError as exc:
            record = msg.raw_message
            log.warning("skipping a record that is not a v1 placement (%s[%s]@%s): %s", options.topic,
                        getattr(record, "partition", "?"), getattr(record, "offset", "?"), exc.errors()[:3])
            return
        if event.namespace != options.namespace:
            return
        result = handle(event)
        if inspect.isawaitable(result):
            await result

    return FastStream(broker)


def _options(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(prog="placement_subscriber", description=__doc__.split("\n")[0])
    parser.add_argument("--namespace", required=True, help="the namespace whose placements to follow")
    parser.add_argument("--group", help="consumer group (default: <namespace>-placements)")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from-offset", default="latest",
                       help="earliest | latest: where a new group starts (default latest); N: every partition from "
                            "offset N")
    start.add_argument("--from-time", help="every partition from this time (ISO 8601; no zone: UTC)")
    parser.add_argument("--bootstrap", default=os.environ.get("GPUPLACE_KAFKA_BOOTSTRAP", "127.0.0.1:29092"))
    parser.add_argument("--topic-suffix", default=os.environ.get("GPUPLACE_TOPIC_SUFFIX", ""),
                        help="the stack's topic suffix (tests, shared brokers)")
    args = parser.parse_args(argv)
    if args.from_offset not in ("earliest", "latest") and not args.from_offset.isdigit():
        parser.error(f"--from-offset must be earliest, latest or a number, not {args.from_offset!r}")
    from_time = None
    if args.from_time:
        try:
            from_time = datetime.fromisoformat(args.from_time.replace("Z", "+00:00"))
        except ValueError:
            parser.error(f"--from-time must be ISO 8601, like 2026-12-01T10:00:00Z, not {args.from_time!r}")
        if from_time.tzinfo is None:
            from_time = from_time.replace(tzinfo=UTC)
    return Options(args.bootstrap, args.namespace, args.group or f"{args.namespace}-placements", args.from_offset,
                   from_time, topics.PLACEMENTS + args.topic_suffix)


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(build(_options(argv)).run())


if __name__ == "__main__":
    main()
