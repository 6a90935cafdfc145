"""Poison input on FastStream's in-memory broker: every bad record ends on the dead-letter topic, once, and
the records after it are still handled (issue 20: nothing stalls a partition)."""

import asyncio
import base64
import hashlib

import asyncpg
import pytest
from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition
from faststream.kafka import TestKafkaBroker
from sqlalchemy import exc as sa_exc

from gpuplace.adapters.kafka import (
    JSON_HEADERS,
    OffsetCommits,
    Route,
    is_transient,
    make_broker,
    partition_of,
    subscribe,
)
from gpuplace.contracts import topics
from gpuplace.contracts.events import PodEvent
from gpuplace.contracts.rejected import Rejected
from tests.builders import pod_event

JSON = JSON_HEADERS


def _wire(handler, *, attempts: int = 3, partitions: int | None = None):
    broker = make_broker("127.0.0.1:9092")
    letters: list[dict] = []
    subscribe(broker, [Route(topics.PODS, PodEvent, handler)], group_id="g", consumer="placement",
              attempts=attempts, backoff_s=0.001, partitions=partitions)

    @broker.subscriber(topics.DEADLETTER)
    async def collect(body: dict) -> None:
        letters.append(body)

    return broker, letters


def _bytes(event: PodEvent) -> bytes:
    return event.model_dump_json(by_alias=True).encode()


@pytest.mark.parametrize("headers", [JSON, {}], ids=["with-json-content-type", "without-headers"])
@pytest.mark.parametrize("value", [b'{"kind": "pending", "namespace": "x"', b"\xff\xfe not utf-8", b"", b"[1, 2"])
async def test_bad_json_is_dead_lettered_whatever_its_content_type(value, headers):
    handled = []

    async def handler(event: PodEvent) -> None:
        handled.append(event.name)

    broker, letters = _wire(handler)
    good = pod_event("after")
    async with TestKafkaBroker(broker) as test_broker:
        await test_broker.publish(value, topic=topics.PODS, key=b"east/x/bad", headers=headers)
        await test_broker.publish(_bytes(good), topic=topics.PODS, key=good.kafka_key(), headers=JSON)
    assert handled == ["after"]
    assert len(letters) == 1
    assert base64.b64decode(letters[0]["original_value_b64"]) == value
    assert letters[0]["original_size"] == len(value)
    assert letters[0]["original_sha256"] == hashlib.sha256(value).hexdigest()


async def test_a_handler_that_always_raises_is_tried_a_bounded_number_of_times_then_dead_lettered():
    calls = []

    async def handler(event: PodEvent) -> None:
        calls.append(event.name)
        if event.name == "poison":
            raise OverflowError("Python int too large to convert to C long")

    broker, letters = _wire(handler, attempts=3)
    poison, good = pod_event("poison"), pod_event("after")
    async with TestKafkaBroker(broker) as test_broker:
        await test_broker.publish(_bytes(poison), topic=topics.PODS, key=poison.kafka_key(), headers=JSON)
        await test_broker.publish(_bytes(good), topic=topics.PODS, key=good.kafka_key(), headers=JSON)
    assert calls == ["poison", "poison", "poison", "after"]
    assert len(letters) == 1
    assert letters[0]["reason"] == ("handler failed 3 time(s): builtins.OverflowError: "
                                    "Python int too large to convert to C long")


async def test_a_rejected_event_is_dead_lettered_at_once_with_its_reason():
    calls = []

    async def handler(event: PodEvent) -> None:
        calls.append(event.name)
        if event.name == "forged":
            raise Rejected("pod robots/forged still runs on the apiserver")

    broker, letters = _wire(handler, attempts=3)
    forged, good = pod_event("forged", kind="deleted"), pod_event("after")
    async with TestKafkaBroker(broker) as test_broker:
        await test_broker.publish(_bytes(forged), topic=topics.PODS, key=forged.kafka_key(), headers=JSON)
        await test_broker.publish(_bytes(good), topic=topics.PODS, key=good.kafka_key(), headers=JSON)
    assert calls == ["forged", "after"]  # not retried: retrying cannot make it true
    assert [letter["reason"] for letter in letters] == ["rejected: pod robots/forged still runs on the apiserver"]


async def test_a_record_on_another_partition_than_its_clusters_is_dead_lettered():
    handled = []

    async def handler(event: PodEvent) -> None:
        handled.append(event.name)

    broker, letters = _wire(handler, partitions=4)
    home = partition_of("east", 4)
    stray, good = pod_event("stray"), pod_event("home")
    async with TestKafkaBroker(broker) as test_broker:
        await test_broker.publish(_bytes(stray), topic=topics.PODS, key=stray.kafka_key(), headers=JSON,
                                  partition=(home + 1) % 4)
        await test_broker.publish(_bytes(good), topic=topics.PODS, key=good.kafka_key(), headers=JSON,
                                  partition=home)
    assert handled == ["home"]
    assert len(letters) == 1 and f"belongs to partition {home} of 4" in letters[0]["reason"]


async def test_a_handler_that_fails_once_then_succeeds_is_not_dead_lettered():
    calls = []

    async def handler(event: PodEvent) -> None:
        calls.append(event.name)
        if len(calls) == 1:
            raise RuntimeError("a bug that goes away")

    broker, letters = _wire(handler)
    good = pod_event("flaky")
    async with TestKafkaBroker(broker) as test_broker:
        await test_broker.publish(_bytes(good), topic=topics.PODS, key=good.kafka_key(), headers=JSON)
    assert calls == ["flaky", "flaky"]
    assert letters == []


async def test_a_transient_error_is_raised_for_redelivery_not_dead_lettered():
    calls = []

    async def handler(event: PodEvent) -> None:
        calls.append(event.name)
        raise ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 25432)")

    broker, letters = _wire(handler)
    event = pod_event("waits")
    async with TestKafkaBroker(broker) as test_broker:
        with pytest.raises(ConnectionRefusedError):  # the in-memory broker surfaces what NACK would redeliver
            await test_broker.publish(_bytes(event), topic=topics.PODS, key=event.kafka_key(), headers=JSON)
    assert calls == ["waits"]  # not retried in process: NACK seeks back and Kafka hands it over again
    assert letters == []


def _wrapped(error: BaseException, wrapper: BaseException) -> BaseException:
    try:
        try:
            raise error
        except BaseException as inner:
            raise wrapper from inner
    except BaseException as outer:
        return outer


def _raised_while_handling(error: BaseException, later: BaseException) -> BaseException:
    try:
        try:
            raise error
        except BaseException:
            raise later  # noqa: B904 - an implicit __context__ on purpose
    except BaseException as outer:
        return outer


def _sqlalchemy(cls: type[sa_exc.DBAPIError], orig: BaseException) -> BaseException:
    return _wrapped(orig, cls("INSERT INTO pods ...", {}, orig))


@pytest.mark.parametrize(("error", "transient"), [
    (ConnectionRefusedError(111, "refused"), True),
    (OSError("Multiple exceptions: [Errno 111] Connect call failed"), True),  # asyncpg, several addresses
    (TimeoutError(), True),
    (asyncpg.CannotConnectNowError("the database system is starting up"), True),
    (asyncpg.AdminShutdownError("terminating connection due to administrator command"), True),
    (asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"), True),
    (asyncpg.TooManyConnectionsError("sorry, too many clients already"), True),
    (asyncpg.DeadlockDetectedError("deadlock detected"), True),
    (_sqlalchemy(sa_exc.OperationalError, ConnectionResetError()), True),
    (_sqlalchemy(sa_exc.InterfaceError, asyncpg.InterfaceError("connection is closed")), True),
    # what a priority of 2**31 raises: asyncpg's client-side DataError, inside SQLAlchemy's InterfaceError
    (_sqlalchemy(sa_exc.InterfaceError, asyncpg.exceptions._base.DataError(
        "invalid input for query argument $5: 2147483648 (value out of int32 range)")), False),
    (_sqlalchemy(sa_exc.DBAPIError, asyncpg.NumericValueOutOfRangeError("integer out of range")), False),
    (OverflowError("Python int too large to convert to C long"), False),
    (ValueError("bad"), False),
    (KeyError("gpu"), False),
    (FileNotFoundError("/etc/gpuplace/x"), False),
    (_raised_while_handling(TimeoutError(), ValueError("a bug raised while handling a timeout")), False),
])
def test_is_transient_splits_outages_from_poison(error, transient):
    assert is_transient(error) is transient


class _Consumer:
    """An aiokafka consumer's commit and assignment: `delay_s` per commit, the first `failures` commits raise."""

    def __init__(self, *, delay_s: float = 0.0, failures: int = 0, assigned: tuple[int, ...] = (0, 1)) -> None:
        self.commits: list[dict] = []
        self.delay_s, self.failures, self.assigned = delay_s, failures, assigned

    async def commit(self, offsets: dict) -> None:
        await asyncio.sleep(self.delay_s)
        if self.failures:
            self.failures -= 1
            raise KafkaError("GroupLoadInProgressError")
        self.commits.append(dict(offsets))

    def assignment(self) -> set[TopicPartition]:
        return {TopicPartition("t", p) for p in self.assigned}


class _Msg:
    def __init__(self, consumer: _Consumer, partition: int, offset: int) -> None:
        self.consumer = consumer
        self.raw_message = type("Record", (), {"topic": "t", "partition": partition, "offset": offset})()


async def test_offsets_are_committed_in_batches_and_only_once_handled():
    consumer = _Consumer()
    commits = OffsetCommits(interval_s=0.05)
    for offset in range(10):  # ten records in well under the interval: one commit now, one when it has passed
        await commits.done(_Msg(consumer, 0, offset))
        await asyncio.sleep(0)
    await commits.done(_Msg(consumer, 1, 7))
    assert len(consumer.commits) == 1 and consumer.commits[0][TopicPartition("t", 0)] < 10  # the first at once
    await asyncio.sleep(0.1)
    assert consumer.commits[1] == {TopicPartition("t", 0): 10, TopicPartition("t", 1): 8}  # next to read
    assert len(consumer.commits) == 2


async def test_the_last_records_of_a_burst_are_committed_while_a_slow_commit_runs():
    """Records done while a commit is in flight are committed after it, without waiting for another record.

    After Kafka restarts a commit can take seconds; the records handled meanwhile used to stay uncommitted until
    the partition's next record, and a partition that went quiet looked stalled (the chaos bench's run c22886).
    """
    consumer = _Consumer(delay_s=0.1)
    commits = OffsetCommits(interval_s=0.01)
    await commits.done(_Msg(consumer, 0, 0))
    await asyncio.sleep(0.02)  # the first commit is in flight
    for offset in (1, 2, 3):
        await commits.done(_Msg(consumer, 0, offset))  # handling does not wait for it
    await asyncio.sleep(0.3)
    assert consumer.commits == [{TopicPartition("t", 0): 1}, {TopicPartition("t", 0): 4}]


async def test_a_failed_commit_is_tried_again_for_the_partitions_still_held():
    consumer = _Consumer(failures=1, assigned=(0,))
    commits = OffsetCommits(interval_s=0.01)
    await commits.done(_Msg(consumer, 0, 5))
    await commits.done(_Msg(consumer, 1, 9))  # partition 1 is no longer this consumer's when the commit fails
    await asyncio.sleep(0.1)
    assert consumer.commits == [{TopicPartition("t", 0): 6}]


async def test_a_commit_that_hangs_gives_up_and_is_tried_again():
    consumer = _Consumer(delay_s=10.0)
    commits = OffsetCommits(interval_s=0.01, timeout_s=0.05)
    await commits.done(_Msg(consumer, 0, 0))
    await asyncio.sleep(0.08)
    consumer.delay_s = 0.0
    await asyncio.sleep(0.1)
    assert consumer.commits == [{TopicPartition("t", 0): 1}]


def _wire_batch(handler, batch):
    broker = make_broker("127.0.0.1:9092")
    letters: list[dict] = []
    subscribe(broker, [Route(topics.PODS, PodEvent, handler, batch=batch)], group_id="g", consumer="placement",
              attempts=2, backoff_s=0.001, batch_records=100)

    @broker.subscriber(topics.DEADLETTER)
    async def collect(body: dict) -> None:
        letters.append(body)

    return broker, letters


async def test_a_batch_subscriber_hands_a_run_of_valid_events_to_the_batch_handler_at_once():
    batches: list[list[str]] = []
    one_by_one: list[str] = []

    async def handler(event: PodEvent) -> None:
        one_by_one.append(event.name)

    async def batch(events: list[PodEvent]) -> None:
        batches.append([e.name for e in events])

    broker, letters = _wire_batch(handler, batch)
    events = [pod_event(f"p{i}") for i in range(3)]
    async with TestKafkaBroker(broker) as test_broker:
        await test_broker.publish_batch(_bytes(events[0]), b"not json", *map(_bytes, events[1:]), topic=topics.PODS,
                                        headers=JSON)
    assert batches == [["p0", "p1", "p2"]] and one_by_one == []  # the malformed record left the run, alone
    assert len(letters) == 1


async def test_a_batch_that_fails_is_handled_one_by_one_so_only_the_poison_event_is_dead_lettered():
    handled: list[str] = []

    async def handler(event: PodEvent) -> None:
        if event.name == "poison":
            raise ValueError("this event breaks the handler")
        handled.append(event.name)

    async def batch(events: list[PodEvent]) -> None:
        for event in events:
            await handler(event)

    broker, letters = _wire_batch(handler, batch)
    events = [pod_event("a"), pod_event("poison"), pod_event("b")]
    async with TestKafkaBroker(broker) as test_broker:
        await test_broker.publish_batch(*map(_bytes, events), topic=topics.PODS, headers=JSON)
    assert handled == ["a", "a", "b"]  # "a" again: handlers are idempotent, the batch's effects may be partial
    assert [letter["reason"] for letter in letters] == [
        "handler failed 2 time(s): builtins.ValueError: this event breaks the handler"]
