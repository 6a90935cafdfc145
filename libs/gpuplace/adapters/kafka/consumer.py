"""The typed, dead-lettering subscriber (subscribe): every service reads its topics through it.

Why a wrapper instead of annotating handlers with the pydantic model directly: a message that fails
validation must reach `gpuplace.deadletter.v1` with the reason and its original bytes, and its offset
must still be committed so the consumer moves on. Handlers therefore receive the raw record, and
`subscribe()` validates it, dead-letters what is malformed, and calls the handler with the typed event.

No record stalls its partition. What can go wrong with a record, and what happens:

    record bytes (never decoded by FastStream: the subscriber's decoder hands over the raw body)
    ├── not JSON, not the topic's schema, out of bounds, an unknown `schema` version (fields the model does
    │       not know are ignored, not refused: contracts.read_event, the schema evolution rule)
    │       -> dead-lettered at once with pydantic's reason; offset committed
    ├── valid, but on a partition its cluster does not hash to (when the subscriber knows the count)
    │       -> dead-lettered at once: the worker owning that partition does not own the cluster
    └── valid: the handler runs, up to `attempts` times in process, with a short backoff
        ├── returns                                  -> offset committed
        ├── raises contracts.Rejected                -> dead-lettered at once with its reason (a forged
        │       deletion, an event id reused for other content: retrying cannot make it true)
        ├── raises a transient infrastructure error  -> re-raised after a growing pause (0.5 s doubling to
        │       10 s): NACK seeks back and the record is read again, for as long as the outage lasts,
        │       because nothing is wrong with the record (transient.is_transient says which errors are)
        └── raises anything else `attempts` times    -> dead-lettered with the exception's class and
                message; offset committed, the consumer moves on

Offsets are committed explicitly, in batches, once a record is handled or dead-lettered (offsets.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import ConsumerRebalanceListener
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from faststream.kafka.annotations import KafkaMessage
from faststream.message import StreamMessage
from pydantic import ValidationError

from gpuplace.adapters.kafka import coordinator_log
from gpuplace.adapters.kafka.dead_letters import dead_letter, failure_reason, validation_reason
from gpuplace.adapters.kafka.offsets import ConsumerLag, OffsetCommits, records_of
from gpuplace.adapters.kafka.partitioning import partition_of
from gpuplace.adapters.kafka.transient import is_transient
from gpuplace.adapters.metrics import PrometheusMetrics
from gpuplace.contracts.envelope import Envelope, read_event
from gpuplace.contracts.rejected import Rejected

# every process that opens a consumer through this module says "waiting for the coordinator" at INFO, not ERROR
coordinator_log.install()

log = logging.getLogger(__name__)

Reject = Callable[[str], Awaitable[None]]
"""Dead-letters the record at hand with the reason given."""


@dataclass(frozen=True)
class Route:
    """Records of `topic` are validated as `model` and handed to `handler`."""

    topic: str
    model: type[Envelope]
    handler: Callable[[Any], Awaitable[object]]  # what it returns is not read
    batch: Callable[[list[Any]], Awaitable[object]] | None = None
    """Takes a run of this topic's valid events at once (a subscriber reading batches: `batch_records`). When it
    raises anything but a transient error, each event of the run goes through `handler` on its own instead,
    so one poison event is dead-lettered alone and the rest are handled (handlers are idempotent)."""
    wants: Callable[[bytes], bool] | None = None
    """A cheap test of a record's bytes, for a consumer that reads a topic for a few of its events (placement reads
    its own placements topic for SLO violations, two records a pod bound among them): a record it refuses is
    skipped, neither parsed nor dead-lettered. It must pass every record the handler acts on."""


Valid = tuple[Route, Envelope, Reject]
"""A record that passed validation: its route, its event, and how to dead-letter it."""


async def _raw_body(msg: StreamMessage[Any]) -> Any:
    """The record's bytes as they came, whatever its content-type header says.

    FastStream decodes a body before the handler runs (faststream/message/utils.py `decode_message`:
    `json_loads(body)` when the header is application/json), so bad JSON with that header raised before
    `_on_record` could dead-letter it, and the seek back redelivered it forever. A subscriber-level decoder
    replaces that step (FastStream docs, "Custom Decoder": https://faststream.ag2.ai/latest/getting-started/
    serialization/decoder/ - "you can set this custom decoder at the broker or subscriber level"); pydantic
    then parses the bytes once, in `_on_record`, where a failure can be dead-lettered. A batch's body is the
    list of its records' bodies, left as it is.
    """
    return msg.body if isinstance(msg.body, list) else bytes(msg.body)


class _Handling:
    """What one subscriber does with the records it reads: validate each, refuse one on a partition its cluster
    does not hash to, run its route's handler (with retries), dead-letter what cannot be handled, and pause
    before reading again after a transient failure. One per `subscribe` call: it remembers each cluster's
    partition and how many transient failures came in a row."""

    def __init__(self, broker: KafkaBroker, routes: Sequence[Route], *, consumer: str, suffix: str, attempts: int,
                 backoff_s: float, partitions: int | None, metrics: PrometheusMetrics | None) -> None:
        self._broker, self._routes, self._consumer, self._suffix = broker, routes, consumer, suffix
        self._attempts, self._backoff_s, self._partitions, self._metrics = attempts, backoff_s, partitions, metrics
        self.by_topic = {route.topic + suffix: route for route in routes}
        self._home: dict[str, int] = {}  # cluster -> its partition, memoised (murmur2 in Python)
        self._failures = 0  # consecutive transient failures, for the pause before the next read

    async def one(self, record: Any, body: bytes) -> None:
        valid = await self._validate(record, body)
        if valid is not None:
            await self._dispatch(*valid)

    async def batch(self, records: Sequence[Any]) -> None:
        """Validate every record, then hand each run of one route's events to its batch handler (in order)."""
        run: list[Valid] = []
        for record in records:
            valid = await self._validate(record, bytes(record.value or b""))
            if valid is None:
                continue
            if run and (valid[0] is not run[0][0] or valid[0].batch is None):
                await self._dispatch_run(run)
                run = []
            run.append(valid)
        if run:
            await self._dispatch_run(run)

    def _rejecter(self, topic: str, record: Any, body: bytes) -> Reject:
        async def reject(reason: str) -> None:
            await dead_letter(self._broker, topic=topic, consumer=self._consumer, reason=reason, value=body,
                              key=getattr(record, "key", None), partition=getattr(record, "partition", None),
                              offset=getattr(record, "offset", None), suffix=self._suffix)
            if self._metrics is not None:
                self._metrics.dead_lettered(topic)
        return reject

    async def _validate(self, record: Any, body: bytes) -> Valid | None:
        """The record's route, event and dead-letter call; None when it was dead-lettered as malformed, or skipped
        unread (Route.wants)."""
        topic = getattr(record, "topic", None) or self._routes[0].topic + self._suffix  # the test broker has none
        route = self.by_topic[topic]
        if route.wants is not None and not route.wants(body):
            return None
        reject = self._rejecter(topic, record, body)
        try:
            event = read_event(route.model, body)
        except ValidationError as exc:
            await reject(validation_reason(exc))
            return None
        misrouted = self._misrouted(event.cluster, getattr(record, "partition", None))
        if misrouted is not None:
            await reject(misrouted)
            return None
        return route, event, reject

    def _misrouted(self, cluster: str, partition: int | None) -> str | None:
        """Why a record of `cluster` does not belong on `partition`; None when it does (or the count is unknown)."""
        if not self._partitions or partition is None:
            return None
        expected = self._home.get(cluster)
        if expected is None:  # murmur2 in Python: once per cluster, not per record
            expected = self._home[cluster] = partition_of(cluster, self._partitions)
        if partition == expected:
            return None
        return (f"cluster {cluster!r} belongs to partition {expected} of {self._partitions}; "
                f"this record came on partition {partition}")

    async def _dispatch_run(self, run: list[Valid]) -> None:
        route = run[0][0]
        if route.batch is not None and len(run) > 1:
            try:
                await route.batch([event for _, event, _ in run])
            except Exception as exc:  # noqa: BLE001 - transient: read again; anything else: one event at a time
                if is_transient(exc):
                    await self._pause_for_outage(route.topic + self._suffix, exc)
                    raise
                log.warning("%s: a batch of %d %s events failed (%r); handling them one by one", self._consumer,
                            len(run), route.topic, exc)
            else:
                self._failures = 0
                return
        for valid in run:
            await self._dispatch(*valid)

    async def _pause_for_outage(self, topic: str, exc: BaseException) -> None:
        self._failures += 1
        pause = min(0.5 * 2 ** (self._failures - 1), 10.0)
        log.warning("%s: transient failure on %s (%s); reading it again in %.1f s", self._consumer, topic, exc,
                    pause)
        await asyncio.sleep(pause)

    async def _dispatch(self, route: Route, event: Envelope, reject: Reject) -> None:
        for attempt in range(1, self._attempts + 1):
            try:
                await route.handler(event)
            except Rejected as exc:
                await reject(f"rejected: {exc}")
                return
            except Exception as exc:  # noqa: BLE001 - sorted below: transient errors re-raise, others are bounded
                if is_transient(exc):
                    await self._pause_for_outage(route.topic + self._suffix, exc)
                    raise
                if attempt == self._attempts:
                    log.exception("%s: %s failed %d time(s); dead-lettering it", self._consumer,
                                  route.topic + self._suffix, self._attempts)
                    await reject(failure_reason(exc, self._attempts))
                    return
                await asyncio.sleep(self._backoff_s * 2 ** (attempt - 1))
            else:
                self._failures = 0
                return


def subscribe(broker: KafkaBroker, routes: Sequence[Route], *, group_id: str, consumer: str, suffix: str = "",
              listener: ConsumerRebalanceListener | None = None, attempts: int = 3,
              backoff_s: float = 0.2, partitions: int | None = None, instance_id: str | None = None,
              metrics: PrometheusMetrics | None = None, batch_records: int | None = None) -> None:
    """One consumer in `group_id` for every route's topic: typed events to its handler, malformed records to
    the dead-letter topic. `listener` hears which partitions this member gains and loses. A handler that
    raises is tried `attempts` times (pausing `backoff_s`, doubling) before its record is dead-lettered,
    unless the error is transient (is_transient): then the record is read again after a pause.

    With `partitions` (the topics' count, for topics keyed by cluster) a record on another partition than its
    cluster's is refused: written there by hand or by a wrong partitioner, it would reach a worker that does
    not own the cluster, and two workers would write one cluster's state.

    `instance_id` makes the member static (KIP-345, `group.instance.id`): restarted with the same id, it gets its
    partitions back without a rebalance and without waiting out the killed member's session.

    `batch_records` reads up to that many records at a time (what the fetcher holds: a burst arrives as one
    batch, a trickle one by one) and hands each run of a route's valid events to its `batch` handler, so a
    service can decide a burst in one transaction; records are validated and dead-lettered one by one as
    before, and the batch's offsets are committed once it is handled.

    `metrics` counts the records dead-lettered (by the topic they came from) and reports the consumer's lag."""
    handling = _Handling(broker, routes, consumer=consumer, suffix=suffix, attempts=attempts, backoff_s=backoff_s,
                         partitions=partitions, metrics=metrics)
    commits = OffsetCommits()
    lag = ConsumerLag(listener)
    subscriber = broker.subscriber(
        *handling.by_topic, group_id=group_id, ack_policy=AckPolicy.MANUAL,
        partition_assignment_strategy=(RangePartitionAssignor,), listener=lag, auto_offset_reset="earliest",
        decoder=_raw_body, group_instance_id=instance_id, title=f"{consumer}:{'+'.join(r.topic for r in routes)}",
        description="; ".join(f"{r.topic}: {r.model.__name__}" for r in routes),
        batch=bool(batch_records), max_records=batch_records, batch_timeout_ms=10)
    lag.subscriber = subscriber
    if metrics is not None:
        metrics.track_lag(lag)

    async def _on_record(msg: KafkaMessage) -> None:
        records = records_of(msg)
        try:
            if batch_records:
                await handling.batch(records)
            else:
                await handling.one(records[0], bytes(msg.body))
        except Exception:
            await msg.nack()  # seek back to the first record: it is read again (a transient failure, logged there)
            raise
        await commits.done(msg)
        for record in records:
            lag.handled(record)

    # Registered by a call, not as a decorator: `subscriber` is FastStream's single or batch subscriber (a union,
    # as `batch` is known only at run time), and mypy takes a decorator of a union type for an untyped one.
    subscriber(_on_record)


__all__ = ["Reject", "Route", "Valid", "subscribe"]
