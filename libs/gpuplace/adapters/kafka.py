"""Kafka wiring shared by every service: the broker factory, the one JSON publish every producer goes through
(publish_json, publish_event), and the typed, dead-lettering subscriber.

Why a wrapper instead of annotating handlers with the pydantic model directly: a message that fails
validation must reach `gpuplace.deadletter.v1` with the reason and its original bytes, and its offset
must still be committed so the consumer moves on. Handlers therefore receive the raw record, and
`subscribe()` validates it, dead-letters what is malformed, and calls the handler with the typed event.

Every record of one cluster goes to one partition (cluster_partitioner), and a service's topics are read by
one consumer with the range assignor, which hands each member the same partition numbers of every topic: a
placement worker therefore owns whole clusters, their pods, nodes and placements alike (DESIGN §2), as long
as the topics have the same partition count (check_copartitioned).

Acknowledgement is explicit (FastStream's Kafka default, ACK_FIRST, commits before the handler runs, which
loses the record a crash interrupts): the offset of a record is committed only after its handler returned or it
was dead-lettered, and a transient failure seeks back to it, so it is read again instead of lost. Commits are
batched (OffsetCommits): one per COMMIT_INTERVAL_S of the offsets processed so far, not one per record, which
halved a worker's throughput; a worker killed meanwhile has its last fraction of a second read again by its
successor, which the consumers' idempotence by event id makes harmless.

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
        │       because nothing is wrong with the record
        └── raises anything else `attempts` times    -> dead-lettered with the exception's class and
                message; offset committed, the consumer moves on

Transient (is_transient), looked for along the exception's explicit causes (`__cause__`, SQLAlchemy's `.orig`):
connection-level OSError (refused, reset, unreachable: not the file-system kinds), TimeoutError, asyncpg's
connection, shutdown, too-many-connections and transaction-rollback (serialization, deadlock) errors, asyncpg
InterfaceErrors other than its client-side DataError, SQLAlchemy's OperationalError / DisconnectionError /
pool TimeoutError / invalidated connections, and aiokafka's connection, timeout and retriable errors.
Everything else is the record's fault or a bug that the record triggers, and is bounded: notably asyncpg's
DataError ("value out of int32 range"), which SQLAlchemy wraps in an InterfaceError, is NOT transient.

Dead-letter copies fit Kafka's default 1 MB message: DeadLetter.of keeps the first 256 KiB of the original
with its full length and SHA-256.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import logging
import math
import os
import re
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
from aiokafka import ConsumerRebalanceListener
from aiokafka import errors as kafka_errors
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.helpers import create_ssl_context
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.structs import TopicPartition
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from faststream.kafka.annotations import KafkaMessage
from faststream.kafka.message import FakeConsumer
from faststream.message import StreamMessage
from faststream.security import BaseSecurity, SASLPlaintext, SASLScram256, SASLScram512
from pydantic import ValidationError
from sqlalchemy import exc as sa_exc

from gpuplace.adapters import dependencies, kafka_coordinator_log, kafka_login
from gpuplace.adapters.metrics import PrometheusMetrics
from gpuplace.contracts import topics
from gpuplace.contracts.envelope import Envelope, read_event
from gpuplace.contracts.events import DeadLetter
from gpuplace.contracts.rejected import Rejected
from gpuplace.settings import ConfigurationError, KafkaAccess, KafkaSettings

# every process that opens a consumer through this module says "waiting for the coordinator" at INFO, not ERROR
kafka_coordinator_log.install()

log = logging.getLogger(__name__)
_CLUSTER_KEY = re.compile(rb"^([a-z0-9](?:[-a-z0-9.]*[a-z0-9])?)/")
_HASH = DefaultPartitioner()


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


def cluster_partitioner(key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
    """The partition of the key's cluster (`cluster/<entity>` keys), hashed as Kafka's default partitioner
    hashes a key, so that one consumer sees a cluster's events in the order they were produced."""
    match = _CLUSTER_KEY.match(key or b"")
    return _HASH(match.group(1) if match else key, all_partitions, available)


def partition_of(cluster: str, partitions: int) -> int:
    """The partition every record of `cluster` goes to, on a topic of `partitions` partitions."""
    return cluster_partitioner(f"{cluster}/".encode(), list(range(partitions)), [])


# A bare bootstrap list (tests, a bench's probes) is reached with the environment's GPUPLACE_KAFKA_* TLS and SASL
# settings, as a service would be: the local stack, like production, has no unauthenticated listener.
Kafka = KafkaAccess | str


def _access(kafka: Kafka) -> KafkaAccess:
    return KafkaSettings(kafka_bootstrap=kafka).kafka if isinstance(kafka, str) else kafka


def _ssl_context(access: KafkaAccess) -> ssl.SSLContext:
    """Verify the brokers (against `ca_file`, else the system's CAs) and, for mutual TLS, present a certificate."""
    for path in (access.ca_file, access.cert_file, access.key_file):
        if path and not os.path.isfile(path):
            raise ValueError(f"Kafka TLS file {path} does not exist")
    return create_ssl_context(cafile=access.ca_file, certfile=access.cert_file, keyfile=access.key_file)


class _Redact(logging.Filter):
    """aiokafka logs every request at DEBUG (`aiokafka.conn`), the SASL/PLAIN handshake's included, whose bytes
    carry the password: with GPUPLACE_LOG_LEVEL=DEBUG it would reach the logs. This filter, on that logger
    itself (so it holds whatever handlers the process has), writes *** in place of each password in use."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if any(secret in message for secret in self.secrets):
            for secret in self.secrets:
                message = message.replace(secret, "***")
            record.msg, record.args = message, None
        return True


_REDACT = _Redact()


def _password(access: KafkaAccess) -> str:
    """The SASL password, registered for redaction from aiokafka's request logs before any client sends it."""
    password = access.password.get_secret_value() if access.password else ""
    if password and password not in _REDACT.secrets:
        _REDACT.secrets.add(password)
        logging.getLogger("aiokafka.conn").addFilter(_REDACT)  # adding the same filter twice keeps one
    return password


def client_options(kafka: Kafka) -> dict[str, Any]:
    """aiokafka keyword arguments (bootstrap, TLS, SASL) for any client: admin, producer, consumer."""
    access = _access(kafka)
    options: dict[str, Any] = {"bootstrap_servers": access.bootstrap, "security_protocol": access.security_protocol}
    if access.security_protocol.endswith("SSL"):
        options["ssl_context"] = _ssl_context(access)
    if access.security_protocol.startswith("SASL_"):
        options.update(sasl_mechanism=access.sasl_mechanism, sasl_plain_username=access.username,
                       sasl_plain_password=_password(access))
    return options


def _security(access: KafkaAccess) -> BaseSecurity | None:
    """The same settings in FastStream's terms (https://faststream.ag2.ai/latest/kafka/security/)."""
    tls = access.security_protocol.endswith("SSL")
    context = _ssl_context(access) if tls else None
    if not access.security_protocol.startswith("SASL_"):
        return BaseSecurity(ssl_context=context, use_ssl=True) if tls else None
    sasl = {"PLAIN": SASLPlaintext, "SCRAM-SHA-256": SASLScram256, "SCRAM-SHA-512": SASLScram512}
    return sasl[access.sasl_mechanism](access.username or "", _password(access), ssl_context=context, use_ssl=tls)


def make_broker(kafka: Kafka, *, client_id: str = "gpuplace", by_cluster: bool = True) -> KafkaBroker:
    """A broker whose producer sends every record of a cluster to one partition (what placement needs of the
    pods, nodes and placements topics), or with `by_cluster=False` spreads them by the whole key: telemetry,
    read by stateless ingest workers, should not funnel a large cluster's GPUs through one partition."""
    access = _access(kafka)
    partitioner = cluster_partitioner if by_cluster else _HASH
    return KafkaBroker(access.bootstrap, client_id=client_id, enable_idempotence=True, partitioner=partitioner,
                       security=_security(access), logger=log, log_level=logging.DEBUG)


@contextlib.asynccontextmanager
async def reaching(kafka: Kafka) -> AsyncIterator[None]:
    """`dependencies.reaching` for Kafka: brokers that do not answer raise `Unreachable`, and brokers that
    refuse the SASL login `Misconfigured` ("refused the login for user placement (SASL authentication
    failed)"), which aiokafka alone reports as the same "Unable to bootstrap" (adapters/kafka_login)."""
    access = _access(kafka)
    try:
        with dependencies.reaching(dependencies.kafka(access)):
            yield
    except dependencies.Unreachable as exc:
        refused = await kafka_login.refusal(access, client_options(access))
        if refused is None:
            raise
        raise dependencies.Misconfigured(dependencies.kafka_login(access), refused) from exc


async def start_broker(broker: KafkaBroker, kafka: Kafka) -> None:
    """`broker.start()`; brokers that do not answer raise `dependencies.Unreachable`, naming the address and
    GPUPLACE_KAFKA_BOOTSTRAP, rather than aiokafka's "Unable to bootstrap" deep in a traceback; a refused
    login raises `dependencies.Misconfigured` naming the user."""
    async with reaching(kafka):
        await broker.start()


def validation_reason(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in exc.errors())


def _cluster_of(key: bytes | None) -> str:
    """The cluster a record belongs to, from its `cluster/<entity>` key; 'unknown' when unreadable."""
    match = _CLUSTER_KEY.match(key or b"")
    return match.group(1).decode() if match else "unknown"


JSON_HEADERS = {"content-type": "application/json"}
"""The headers of every record gpuplace produces: its bodies are JSON (FastStream decodes by this header)."""


async def publish_json(broker: KafkaBroker, body: bytes, *, topic: str, key: bytes | None, **options: Any) -> Any:
    """Publish one JSON record with JSON_HEADERS: every gpuplace producer sends through here or publish_event.
    `options` go to FastStream's publish (no_confirm=True: the acknowledgement comes back as a future)."""
    return await broker.publish(body, topic=topic, key=key, headers=dict(JSON_HEADERS), **options)


class Acknowledgements:
    """Sends kept in flight without waiting for each one's acknowledgement: at most `window` at once, reaped in
    order as they complete.

    A publisher that awaits every acknowledgement sends one record per broker round trip: a watcher did, and
    fell minutes behind a burst of pods. In flight, records accumulate into batches (aiokafka's linger), and
    order is kept (aiokafka has one request in flight per partition). A send that fails makes `failed()`
    raise, ending the publisher as a failed send did; a watcher then lists everything again, so what was never
    acknowledged is published again, not lost."""

    def __init__(self, window: int = 512) -> None:
        self._window = window
        self._in_flight: collections.deque[asyncio.Future[Any]] = collections.deque()
        self._failure: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def sent(self, ack: asyncio.Future[Any]) -> None:
        """`ack` (FastStream's no_confirm future) is in flight; wait only when `window` are."""
        if self._failure.done():
            self._failure.result()
        ack.add_done_callback(self._check)
        self._in_flight.append(ack)
        while self._in_flight and (len(self._in_flight) > self._window or self._in_flight[0].done()):
            await self._in_flight.popleft()

    def _check(self, ack: asyncio.Future[Any]) -> None:
        error = None if ack.cancelled() else ack.exception()
        if error is not None and not self._failure.done():
            self._failure.set_exception(error)

    async def failed(self) -> None:
        """Never returns: raises the first failed send's error."""
        await self._failure


async def publish_event(broker: KafkaBroker, event: Envelope, *, topic: str, **options: Any) -> Any:
    """Publish an event as its JSON (by alias), under its `cluster/<entity>` key."""
    return await publish_json(broker, event.model_dump_json(by_alias=True).encode(), topic=topic,
                              key=event.kafka_key(), **options)


async def dead_letter(broker: KafkaBroker, *, topic: str, consumer: str, reason: str, value: bytes,
                      key: bytes | None, partition: int | None, offset: int | None, suffix: str = "") -> None:
    letter = DeadLetter.of(cluster=_cluster_of(key), source_topic=topic, consumer=consumer, reason=reason,
                           value=value, key=key, partition=partition, offset=offset)
    await publish_event(broker, letter, topic=topics.DEADLETTER + suffix)
    log.warning("dead-lettered %s[%s]@%s: %s", topic, partition, offset, reason)


_FILE_ERRORS = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError)
_TRANSIENT = (
    TimeoutError,  # asyncio.TimeoutError is this class since Python 3.11
    asyncpg.PostgresConnectionError, asyncpg.CannotConnectNowError, asyncpg.OperatorInterventionError,
    asyncpg.InsufficientResourcesError, asyncpg.TransactionRollbackError,
    sa_exc.OperationalError, sa_exc.DisconnectionError, sa_exc.TimeoutError,
    kafka_errors.KafkaConnectionError, kafka_errors.KafkaTimeoutError, kafka_errors.NodeNotReadyError,
)
_NOT_TRANSIENT_INTERFACE = (asyncpg.exceptions._base.DataError, asyncpg.exceptions._base.ClientConfigurationError,
                            asyncpg.exceptions._base.UnsupportedClientFeatureError)


def _causes(exc: BaseException) -> list[BaseException]:
    """`exc` and what it wraps (`raise ... from`, SQLAlchemy's `.orig`), each once. Not `__context__`: an error
    raised while handling an unrelated timeout would look transient and retry forever."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo and len(seen) < 16:
        current = todo.pop(0)
        if current is None or any(current is s for s in seen):
            continue
        seen.append(current)
        todo += [current.__cause__, getattr(current, "orig", None)]
    return seen


def is_transient(exc: BaseException) -> bool:
    """True when `exc` says the database or Kafka is unreachable or busy, not that the record is bad
    (the split is in the module docstring)."""
    chain = _causes(exc)
    if any(isinstance(e, _NOT_TRANSIENT_INTERFACE) for e in chain):
        return False  # asyncpg could not encode a value of the record: retrying cannot help
    if any(isinstance(e, dependencies.Misconfigured) for e in chain):
        return False  # a refusal of the settings (a refused Kafka login, raised from the outage it looked like)
    for e in chain:
        if isinstance(e, _TRANSIENT) or getattr(e, "connection_invalidated", False):
            return True
        if isinstance(e, kafka_errors.KafkaError) and getattr(e, "retriable", False):
            return True
        if isinstance(e, asyncpg.InterfaceError | sa_exc.InterfaceError):
            return True  # "connection is closed", "another operation in progress" after a drop
        if isinstance(e, OSError) and not isinstance(e, _FILE_ERRORS):
            return True  # refused, reset, unreachable; asyncpg's "Multiple exceptions" OSError has no errno
    return False


def _error_reason(exc: BaseException, attempts: int) -> str:
    return f"handler failed {attempts} time(s): {type(exc).__module__}.{type(exc).__qualname__}: {exc}"


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


COMMIT_INTERVAL_S = 0.25
COMMIT_TIMEOUT_S = 10.0


class OffsetCommits:
    """The offsets a subscriber has finished with, committed in the background at most every COMMIT_INTERVAL_S.

    Only offsets of records whose handling ended are recorded, so a commit at any moment (even while the next
    record is being handled) never covers a record that may still fail. Handling never waits for a commit:
    after Kafka restarts, a commit can take the coordinator's whole reload, and a handler waiting on it stalls
    its partitions. One flusher task commits what has been recorded, then what was recorded meanwhile, until
    nothing is left, so the last records of a burst are committed too (and not only when the next record
    comes). A commit that fails or takes longer than COMMIT_TIMEOUT_S is tried again with the next one, for the
    partitions the consumer still holds; those it lost are read again by their new owner."""

    def __init__(self, interval_s: float = COMMIT_INTERVAL_S, timeout_s: float = COMMIT_TIMEOUT_S) -> None:
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._done: dict[TopicPartition, int] = {}
        self._last = -math.inf
        self._flusher: asyncio.Task[None] | None = None
        self._consumer: Any = None
        self._failing = False

    async def done(self, msg: KafkaMessage) -> None:
        """`msg` (one record, or a batch of them) is handled: commit past it."""
        consumer = getattr(msg, "consumer", None)
        if consumer is None or isinstance(consumer, FakeConsumer):  # the in-memory test broker: nothing to commit
            await msg.ack()
            return
        self._consumer = consumer
        for record in _records(msg):
            tp = TopicPartition(record.topic, record.partition)
            self._done[tp] = max(self._done.get(tp, 0), record.offset + 1)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())

    async def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        while self._done:
            await asyncio.sleep(max(0.0, self._last + self._interval_s - loop.time()))
            self._last = loop.time()
            offsets, self._done = self._done, {}
            await self._commit(offsets)

    async def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        try:
            await asyncio.wait_for(self._consumer.commit(offsets), self._timeout_s)
        except Exception as exc:  # noqa: BLE001 - Kafka away, the group reloading, the partition reassigned
            held = self._consumer.assignment()
            for tp, offset in offsets.items():
                if tp in held:
                    self._done.setdefault(tp, offset)  # a later offset recorded meanwhile supersedes it
            if not self._failing:
                log.warning("committing %d partition offset(s) failed (%r); trying again with the next commit",
                            len(offsets), exc)
            self._failing = True
        else:
            if self._failing:
                log.info("offset commits succeed again")
            self._failing = False


class ConsumerLag(ConsumerRebalanceListener):
    """One subscriber's lag, per partition it holds: the partition's highwater (from the consumer's last fetch)
    less the offset of the next record to handle. That is the offset after the last record this member handled
    (or dead-lettered) on it, else the consumer's position, which is where it resumed: the position alone runs
    ahead of the handler by what the fetcher buffered, and would hide a slow handler.

    It is the subscriber's rebalance listener too (wrapping the caller's), to forget what it handled on a
    partition it loses: the partition's next owner moves it on."""

    def __init__(self, inner: ConsumerRebalanceListener | None) -> None:
        self._inner = inner
        self._next: dict[TopicPartition, int] = {}
        self.subscriber: Any = None  # FastStream's subscriber; its `consumer` is the started AIOKafkaConsumer

    def handled(self, record: Any) -> None:
        topic, partition, offset = (getattr(record, a, None) for a in ("topic", "partition", "offset"))
        if topic is not None and partition is not None and offset is not None:  # not the in-memory test broker's
            self._next[TopicPartition(topic, partition)] = offset + 1

    async def on_partitions_revoked(self, revoked: Any) -> None:
        for tp in revoked:
            self._next.pop(tp, None)
        if self._inner is not None:
            await _maybe_await(self._inner.on_partitions_revoked(revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        if self._inner is not None:
            await _maybe_await(self._inner.on_partitions_assigned(assigned))

    async def lags(self) -> dict[tuple[str, int], int]:
        consumer = getattr(self.subscriber, "consumer", None)
        if consumer is None:  # not started, or stopped
            return {}
        lags = {}
        for tp in consumer.assignment():
            high = consumer.highwater(tp)
            if high is None:  # nothing fetched from it yet
                continue
            position = self._next.get(tp)
            if position is None:
                position = await consumer.position(tp)
            lags[(tp.topic, tp.partition)] = max(0, high - position)
        return lags


async def _maybe_await(result: Any) -> None:
    if inspect.isawaitable(result):
        await result


async def check_broker(broker: KafkaBroker, timeout_s: float = 2.0) -> None:
    """Raise unless a broker answers `broker`'s admin client within `timeout_s` (a readiness check)."""
    if not await broker.ping(timeout_s):
        raise ConnectionError(f"no Kafka broker answered within {timeout_s:g} s")


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
    by_topic = {route.topic + suffix: route for route in routes}
    home: dict[str, int] = {}  # cluster -> its partition, memoised (murmur2 in Python)
    outage = {"failures": 0}  # consecutive transient failures, for the pause before the next read

    commits = OffsetCommits()
    lag = ConsumerLag(listener)
    subscriber = broker.subscriber(
        *by_topic, group_id=group_id, ack_policy=AckPolicy.MANUAL,
        partition_assignment_strategy=(RangePartitionAssignor,), listener=lag, auto_offset_reset="earliest",
        decoder=_raw_body, group_instance_id=instance_id, title=f"{consumer}:{'+'.join(r.topic for r in routes)}",
        description="; ".join(f"{r.topic}: {r.model.__name__}" for r in routes),
        batch=bool(batch_records), max_records=batch_records, batch_timeout_ms=10)
    lag.subscriber = subscriber
    if metrics is not None:
        metrics.track_lag(lag)

    @subscriber
    async def _on_record(msg: KafkaMessage) -> None:
        records = _records(msg)
        try:
            if batch_records:
                await _handle_batch(records)
            else:
                await _handle(records[0], bytes(msg.body))
        except Exception:
            await msg.nack()  # seek back to the first record: it is read again (a transient failure, logged there)
            raise
        await commits.done(msg)
        for record in records:
            lag.handled(record)

    def _rejecter(topic: str, record: Any, body: bytes) -> Callable[[str], Awaitable[None]]:
        async def reject(reason: str) -> None:
            await dead_letter(broker, topic=topic, consumer=consumer, reason=reason, value=body,
                              key=getattr(record, "key", None), partition=getattr(record, "partition", None),
                              offset=getattr(record, "offset", None), suffix=suffix)
            if metrics is not None:
                metrics.dead_lettered(topic)
        return reject

    async def _validate(record: Any, body: bytes) -> tuple[Route, Envelope, Callable[[str], Awaitable[None]]] | None:
        """The record's route, event and dead-letter call; None when it was dead-lettered as malformed, or skipped
        unread (Route.wants)."""
        topic = getattr(record, "topic", None) or routes[0].topic + suffix  # the in-memory test broker has none
        route = by_topic[topic]
        if route.wants is not None and not route.wants(body):
            return None
        reject = _rejecter(topic, record, body)
        try:
            event = read_event(route.model, body)
        except ValidationError as exc:
            await reject(validation_reason(exc))
            return None
        partition = getattr(record, "partition", None)
        if partitions and partition is not None:
            cluster = event.cluster
            expected = home.get(cluster)
            if expected is None:  # murmur2 in Python: once per cluster, not per record
                expected = home[cluster] = partition_of(cluster, partitions)
            if partition != expected:
                await reject(f"cluster {cluster!r} belongs to partition {expected} of {partitions}; "
                             f"this record came on partition {partition}")
                return None
        return route, event, reject

    async def _handle(record: Any, body: bytes) -> None:
        valid = await _validate(record, body)
        if valid is not None:
            await _dispatch(*valid)

    async def _handle_batch(records: Sequence[Any]) -> None:
        """Validate every record, then hand each run of one route's events to its batch handler (in order)."""
        run: list[tuple[Route, Envelope, Callable[[str], Awaitable[None]]]] = []
        for record in records:
            valid = await _validate(record, bytes(record.value or b""))
            if valid is None:
                continue
            if run and (valid[0] is not run[0][0] or valid[0].batch is None):
                await _dispatch_run(run)
                run = []
            run.append(valid)
        if run:
            await _dispatch_run(run)

    async def _dispatch_run(run: list[tuple[Route, Envelope, Callable[[str], Awaitable[None]]]]) -> None:
        route = run[0][0]
        if route.batch is not None and len(run) > 1:
            try:
                await route.batch([event for _, event, _ in run])
            except Exception as exc:  # noqa: BLE001 - transient: read again; anything else: one event at a time
                if is_transient(exc):
                    await _pause_for_outage(route.topic + suffix, exc)
                    raise
                log.warning("%s: a batch of %d %s events failed (%r); handling them one by one", consumer,
                            len(run), route.topic, exc)
            else:
                outage["failures"] = 0
                return
        for valid in run:
            await _dispatch(*valid)

    async def _pause_for_outage(topic: str, exc: BaseException) -> None:
        outage["failures"] += 1
        pause = min(0.5 * 2 ** (outage["failures"] - 1), 10.0)
        log.warning("%s: transient failure on %s (%s); reading it again in %.1f s", consumer, topic, exc, pause)
        await asyncio.sleep(pause)

    async def _dispatch(route: Route, event: Envelope, reject: Callable[[str], Awaitable[None]]) -> None:
        for attempt in range(1, attempts + 1):
            try:
                await route.handler(event)
            except Rejected as exc:
                await reject(f"rejected: {exc}")
                return
            except Exception as exc:  # noqa: BLE001 - sorted below: transient errors re-raise, others are bounded
                if is_transient(exc):
                    await _pause_for_outage(route.topic + suffix, exc)
                    raise
                if attempt == attempts:
                    log.exception("%s: %s failed %d time(s); dead-lettering it", consumer, route.topic + suffix,
                                  attempts)
                    await reject(_error_reason(exc, attempts))
                    return
                await asyncio.sleep(backoff_s * 2 ** (attempt - 1))
            else:
                outage["failures"] = 0
                return


def _records(msg: KafkaMessage) -> tuple[Any, ...]:
    """The record(s) a message carries: a batch subscriber's tuple (a list on the in-memory test broker), or one."""
    raw = msg.raw_message
    return tuple(raw) if isinstance(raw, tuple | list) else (raw,)


@contextlib.asynccontextmanager
async def admin_client(kafka: Kafka) -> AsyncIterator[AIOKafkaAdminClient]:
    """A started admin client for the topic calls below, closed however the block ends."""
    admin = AIOKafkaAdminClient(**client_options(kafka))
    async with reaching(kafka):
        await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


def _refusal(failed: dict[str, str], replication_factor: int) -> str:
    """One line for topics the broker refused, each reason once (seven topics refused for want of brokers gave
    the same sentence seven times), with the settings to change when the replication factor is the reason."""
    reasons: dict[str, list[str]] = {}
    for topic, reason in failed.items():
        reasons.setdefault(reason, []).append(topic)
    text = "; ".join(f"{reason.rstrip('.')} ({', '.join(names)})" for reason, names in reasons.items())
    if any("replication factor" in reason.lower() for reason in reasons):
        text += (f"; the replication factor asked for was {replication_factor}: lower it to the brokers the Kafka "
                 "cluster has (GPUPLACE_TOPIC_REPLICATION_FACTOR, `gpuplace topics --replication-factor N`, the "
                 "chart's kafka.topics.replicationFactor), or 0 for as many as it has, at most 3")
    return f"the broker refused to create topics: {text}"


async def broker_count(kafka: Kafka) -> int:
    """How many brokers the Kafka cluster has (its metadata's broker list)."""
    async with admin_client(kafka) as admin:
        return len((await admin.describe_cluster())["brokers"])


async def list_topics(kafka: Kafka) -> set[str]:
    """Every topic the broker has."""
    async with admin_client(kafka) as admin:
        return set(await admin.list_topics())


async def check_copartitioned(kafka: Kafka, names: Sequence[str]) -> int | None:
    """Refuse to consume `names` together unless the existing ones have one partition count: otherwise a
    cluster's pods and nodes land on partitions that two different workers own. Topics not created yet are
    skipped (the broker creates them with its one default count). Returns the count, None if none exists."""
    async with admin_client(kafka) as admin:
        existing = set(await admin.list_topics())
        present = [n for n in names if n in existing]
        described = await admin.describe_topics(present) if present else []  # None or [] describes every topic
    counts = {t["topic"]: len(t["partitions"]) for t in described}
    if len(set(counts.values())) > 1:
        raise ValueError("topics read together must have the same partition count, so that one worker owns "
                         f"a cluster's records on all of them; found {counts}")
    return next(iter(counts.values()), None)


async def ensure_topics(kafka: Kafka, names: list[str], *, partitions: int = 4, replication_factor: int = 1,
                        visible_within_s: float = 30.0) -> None:
    """Create missing topics up front (keyed by cluster, so partitions spread clusters over workers).

    Brokers may auto-create topics, but a consumer that subscribes first only sees "topic not found"
    until a producer writes; creating them explicitly keeps start-up quiet and the partition count chosen.

    CreateTopics returns once the controller has recorded the topics; a broker's metadata cache catches up
    a moment later. Until then a subscriber or `check_copartitioned` would not see them, so this waits
    (up to `visible_within_s`) for the metadata to list every created topic with all its partitions.
    """
    async with admin_client(kafka) as admin:
        existing = set(await admin.list_topics())
        missing = [NewTopic(n, num_partitions=partitions, replication_factor=replication_factor)
                   for n in names if n not in existing]
        if not missing:
            return
        response = (await admin.create_topics(missing)).to_object()
        failed = {e["topic"]: e.get("error_message") or kafka_errors.for_code(e["error_code"]).__name__
                  for e in response["topic_errors"]
                  if e["error_code"] not in (0, kafka_errors.TopicAlreadyExistsError.errno)}
        if failed:
            raise ConfigurationError(_refusal(failed, replication_factor))
        # ours must show every partition; one another client created meanwhile (TopicAlreadyExists), any
        expected = {e["topic"]: partitions if e["error_code"] == 0 else None for e in response["topic_errors"]}
        created = [t.name for t in missing]
        deadline = asyncio.get_running_loop().time() + visible_within_s
        while True:
            described = await admin.describe_topics(created)
            if len(described) == len(created) and all(
                    t["error_code"] == 0 and t["partitions"]
                    and expected.get(t["topic"]) in (None, len(t["partitions"])) for t in described):
                return
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"created topics {created} but the broker's metadata did not show them "
                                   f"with {partitions} partitions within {visible_within_s} s")
            await asyncio.sleep(0.1)


async def ensure_copartitioned(kafka: Kafka, names: Sequence[str], *, partitions: int = 4,
                               replication_factor: int = 1) -> int:
    """Topics read together exist with one partition count; return it. Missing ones are created with the count
    the existing ones have (else `partitions`), a mix is refused (check_copartitioned).

    A service that starts before its topics exist would otherwise have them auto-created by the first producer,
    with the broker's own count, and a producer whose first metadata of a topic just auto-created lists fewer
    partitions sends a cluster's record to the wrong one (placement then refuses it: "cluster belongs to
    partition 1 of 3; this record came on partition 0"). So cluster-watcher and placement both call this first;
    a deployment's `gpuplace topics` job makes it a no-op."""
    count = await check_copartitioned(kafka, names) or partitions
    await ensure_topics(kafka, list(names), partitions=count, replication_factor=replication_factor)
    found = await check_copartitioned(kafka, names)  # another service may have created them meanwhile
    assert found is not None
    return found


async def delete_topics(kafka: Kafka, names: Iterable[str]) -> list[str]:
    """Delete those of `names` the broker has; return them.

    Runs, benches and tests create topics under a suffix of their own. Left behind, they add up: a broker
    holding thousands of partitions takes minutes to restart, which is itself an outage for every service.
    """
    async with admin_client(kafka) as admin:
        present = sorted(set(names) & set(await admin.list_topics()))
        if present:
            await admin.delete_topics(present)
        return present


__all__ = ["Kafka", "client_options", "Route", "ConsumerLag", "check_broker", "cluster_partitioner",
           "ensure_copartitioned", "partition_of", "make_broker", "subscribe", "dead_letter", "validation_reason",
           "is_transient", "reaching", "check_copartitioned", "ensure_topics", "delete_topics", "admin_client",
           "list_topics", "JSON_HEADERS", "publish_json", "publish_event"]
