"""What `gpuplace bench chaos` watches on Kafka while it breaks things: dead letters and partition stalls.

Both read the broker from outside the services, so a service that lies about its progress cannot hide a stall,
and both survive the broker being restarted under them (a failed sample is skipped, not fatal): the outage
itself is what they are there to see.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import logging
import time
from collections import Counter
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from gpuplace.adapters.kafka import Kafka, client_options

log = logging.getLogger(__name__)


@dataclass
class DeadLetterTap:
    """Every record of the run's dead-letter topic, by the SHA-256 of the original it carries.

    Redelivery after a kill may dead-letter one record twice (at-least-once), so copies are counted apart from
    distinct originals. Letters whose original the bench did not send are kept with their reason: a real event
    dead-lettered during an outage would be a lost pod's first trace.
    """

    kafka: Kafka
    topic: str
    copies: Counter[str] = field(default_factory=Counter)  # original_sha256 -> dead letters seen
    letters: dict[str, dict[str, str]] = field(default_factory=dict)  # original_sha256 -> source and reason

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self._consume(stop)
            except Exception as exc:  # noqa: BLE001 - the broker restarting under the tap: start it again
                log.info("dead-letter tap: %s; reconnecting", exc)
                await asyncio.sleep(1.0)

    async def _consume(self, stop: asyncio.Event) -> None:
        consumer = AIOKafkaConsumer(self.topic, **client_options(self.kafka), group_id=None,
                                    auto_offset_reset="earliest", fetch_max_bytes=8 * 2**20)
        try:
            await consumer.start()
            while not stop.is_set():
                batches = await consumer.getmany(timeout_ms=500)
                for records in batches.values():
                    for record in records:
                        self._add(record.value)
        finally:
            with contextlib.suppress(Exception):
                await consumer.stop()

    def _add(self, value: bytes | None) -> None:
        try:
            letter = json.loads(value or b"")
            digest = letter.get("original_sha256") or hashlib.sha256(
                base64.b64decode(letter["original_value_b64"])).hexdigest()
        except (ValueError, KeyError, TypeError):
            digest = "unreadable:" + hashlib.sha256(value or b"").hexdigest()
            letter = {}
        if digest not in self.copies:  # the first copy seen is kept
            self.letters[digest] = {"source_topic": str(letter.get("source_topic")),
                                    "consumer": str(letter.get("consumer")), "reason": str(letter.get("reason"))[:300]}
        self.copies[digest] += 1


@dataclass
class _PartitionWatch:
    committed: int | None = None
    since: float | None = None  # when lag > 0 last began without the committed offset moving
    longest_s: float = 0.0
    max_lag: int = 0


def overlap(start: float, end: float, windows: list[list[float | None]]) -> float:
    """Seconds of [start, end] inside `windows` ([from, to], `to` None while still open): the time the broker
    itself was away, which no consumer can be blamed for."""
    total = 0.0
    for w_start, w_end in windows:
        assert w_start is not None, "a window opens with its start"
        total += max(0.0, min(end, w_end if w_end is not None else end) - max(start, w_start))
    return total


@dataclass
class LagMonitor:
    """The longest time each watched partition had records waiting and its group's committed offset did not
    move: a stall. A partition that is behind but advancing is busy, not stalled; one whose consumer died, or
    whose broker is away, is stalled until it moves again.

    Sampled from outside, so it is blind while the broker (or its group coordinator) is away: a stall that both
    begins and ends inside such a blind spot is missed. The canary pod events (chaos_run) time the pods
    partitions end to end and catch those; this monitor is what covers the other topics."""

    kafka: Kafka
    watched: dict[str, list[TopicPartition]]  # consumer group -> the partitions it must drain
    partitions: dict[tuple[str, str, int], _PartitionWatch] = field(default_factory=dict)
    samples: int = 0
    failed_samples: int = 0
    _last_ok: float | None = None  # the last sample that succeeded: before it, every lag was known
    away: list[list[float | None]] = field(default_factory=list)  # monotonic windows of Kafka restarts

    async def run(self, stop: asyncio.Event, interval_s: float = 1.0) -> None:
        while not stop.is_set():
            try:
                await self._watch(stop, interval_s)
            except Exception as exc:  # noqa: BLE001 - the broker restarting: keep the clocks, reconnect
                self.failed_samples += 1
                log.info("lag monitor: %s; reconnecting", exc)
                await asyncio.sleep(1.0)

    async def _watch(self, stop: asyncio.Event, interval_s: float) -> None:
        admin = AIOKafkaAdminClient(**client_options(self.kafka), request_timeout_ms=5000)
        ends = AIOKafkaConsumer(**client_options(self.kafka), group_id=None, request_timeout_ms=5000)
        try:
            await admin.start()
            await ends.start()
            while not stop.is_set():
                await self.sample(admin, ends)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), interval_s)
        finally:  # either may have failed to start: both are closed, quietly
            with contextlib.suppress(Exception):
                await ends.stop()
            with contextlib.suppress(Exception):
                await admin.close()

    async def sample(self, admin: AIOKafkaAdminClient, ends: AIOKafkaConsumer) -> None:
        now = time.monotonic()
        for group, tps in self.watched.items():
            committed = await asyncio.wait_for(admin.list_consumer_group_offsets(group, partitions=tps), 10)
            end = await asyncio.wait_for(ends.end_offsets(tps), 10)
            for tp in tps:
                meta = committed.get(tp)
                offset = meta.offset if meta is not None and meta.offset >= 0 else 0
                self.observe((group, tp.topic, tp.partition), end[tp] - offset, offset, now)
        self.samples += 1
        self._last_ok = now

    def observe(self, key: tuple[str, str, int], lag: int, committed: int, now: float) -> None:
        """A wait that appears with nothing consumed since the last good sample began after that sample, which
        may be long ago when the broker was away meanwhile: counting from there errs towards a longer stall."""
        watch = self.partitions.setdefault(key, _PartitionWatch())
        watch.max_lag = max(watch.max_lag, lag)
        if lag <= 0:
            watch.since = None
        elif watch.since is None:
            unmoved = watch.committed == committed and self._last_ok is not None
            watch.since = self._last_ok if unmoved else now
        elif committed != watch.committed:
            watch.since = now
        watch.committed = committed
        if watch.since is not None:
            watch.longest_s = max(watch.longest_s, now - watch.since - overlap(watch.since, now, self.away))

    def lagging(self) -> int:
        """Partitions with records waiting at the last sample."""
        return sum(1 for w in self.partitions.values() if w.since is not None)

    def longest(self) -> dict[str, dict[str, float | int]]:
        return {f"{topic}[{partition}] ({group})": {"longest_stall_s": round(w.longest_s, 1), "max_lag": w.max_lag}
                for (group, topic, partition), w in sorted(self.partitions.items())}


__all__ = ["DeadLetterTap", "LagMonitor", "overlap"]
