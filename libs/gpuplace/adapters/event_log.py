"""The exported event log's format: one Kafka record a line, as JSON Lines, and the order the lines go in.

`gpuplace export` writes it, `gpuplace import` publishes it back, replay and offline analysis read it. Each line:

    {"topic": "gpuplace.pods.v1", "partition": 2, "offset": 117, "timestamp": 1764650000123,
     "key": "east/robots/slam-0", "schema": 1, "event": {...the record's JSON, as recorded...}}

`topic` is the contract's topic name, without the stack's GPUPLACE_TOPIC_SUFFIX (a log moves between stacks);
`partition` and `offset` say where the record was (an import re-partitions by key on the target's topics);
`timestamp` is the record's Kafka timestamp in ms since the epoch, which an import keeps; `schema` is the event's
envelope version (None when the record has none). The event is kept as recorded, not re-validated: a record the
consumers dead-lettered is in the log too, and is dead-lettered again when the log is replayed or imported.

Order: each partition's records by offset, the partitions merged by timestamp; equal timestamps go in the order
of topics.ALL_TOPICS (pods before nodes before ... placements), then by partition. Merging never reorders one
partition, whose order is what consumers saw, even where its producer-set timestamps are not monotonic.

Pure: no Kafka here (kafka/event_log.py reads and writes the topics), so it is tested without a broker.
"""

from __future__ import annotations

import heapq
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar, overload

from gpuplace.contracts import topics
from gpuplace.contracts.events import TOPIC_MODELS

FIELDS = ("topic", "partition", "offset", "timestamp", "key", "schema", "event")
# Records spread over partitions by their whole key (gpu-agent's broker, make_broker(by_cluster=False)): a cluster's
# telemetry is on every partition, so an export reads them all and an import hashes the whole key again.
SPREAD_BY_KEY = frozenset({topics.TELEMETRY})
_SHORT = {name.split(".")[1]: name for name in topics.ALL_TOPICS}  # "pods" -> "gpuplace.pods.v1"
_RANK = {name: rank for rank, name in enumerate(topics.ALL_TOPICS)}


class BadLogLine(ValueError):
    """A line of an event log file that is not a record of the format above; the message names its number."""


class ClusterNotInLog(LookupError):
    """An export or replay of a cluster the topics hold no record of: a typo, or another stack's topic suffix.
    The message is one line naming the topics read and the clusters found on them."""

    def __init__(self, cluster: str, read: Sequence[str], absent: Sequence[str], present: Sequence[str]) -> None:
        found = [name for name in read if name not in absent]
        if not found:
            text = (f"no records of cluster {cluster!r}: none of the topics {', '.join(read)} exists (check "
                    "GPUPLACE_TOPIC_SUFFIX or --topic-suffix)")
        else:
            clusters = (f"clusters with records there: {', '.join(present)}" if present
                        else "they hold no record of any cluster")
            text = f"no records of cluster {cluster!r} found on {', '.join(found)}; {clusters}"
        super().__init__(text)
        self.cluster, self.present = cluster, list(present)


@dataclass(frozen=True)
class LogRecord:
    """One line of the log."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: str | None
    schema: int | None
    event: dict[str, Any]

    def line(self) -> str:
        """The record as one JSON line (no newline), its fields in FIELDS order."""
        return json.dumps({name: getattr(self, name) for name in FIELDS}, ensure_ascii=False,
                          separators=(",", ":"))

    def key_bytes(self) -> bytes | None:
        return None if self.key is None else self.key.encode("utf-8", "surrogateescape")

    def body(self) -> bytes:
        """The event as a record value: compact JSON, as pydantic's model_dump_json writes it."""
        return json.dumps(self.event, ensure_ascii=False, separators=(",", ":")).encode()

    def order(self) -> tuple[int, int, int, int]:
        return self.timestamp, _RANK.get(self.topic, len(_RANK)), self.partition, self.offset


def topic_names(spec: str | None) -> list[str]:
    """The topics `--topics pods,nodes,placements` names (short or full names); every topic when None."""
    if not spec:
        return list(topics.ALL_TOPICS)
    chosen = []
    for word in (w.strip() for w in spec.split(",")):
        name = _SHORT.get(word, word)
        if name not in TOPIC_MODELS:
            raise ValueError(f"unknown topic {word!r}; choose from {', '.join(_SHORT)} (or their full names)")
        if name not in chosen:
            chosen.append(name)
    return chosen


def parse_time(text: str) -> int:
    """ms since the epoch from ISO 8601 (`2026-12-01T10:00:00Z`; no zone means UTC) or a bare integer of ms."""
    text = text.strip()
    if re.fullmatch(r"\d+", text):
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not a time: give ISO 8601 (2026-12-01T10:00:00Z) or ms since the "
                         "epoch") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def of_record(topic: str, partition: int, offset: int, timestamp: int, key: bytes | None,
              value: bytes | None) -> LogRecord | None:
    """The log line of one Kafka record of `topic` (the contract's name); None when its value is not a JSON object
    (a poison record: its dead-letter copy, on gpuplace.deadletter.v1, is what the log keeps of it)."""
    try:
        event = json.loads(value or b"")
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(event, dict):
        return None
    schema = event.get("schema")
    return LogRecord(topic, partition, offset, timestamp,
                     None if key is None else key.decode("utf-8", "surrogateescape"),
                     schema if isinstance(schema, int) and not isinstance(schema, bool) else None, event)


def merge(partitions: Iterable[Sequence[LogRecord]]) -> Iterator[LogRecord]:
    """Each partition's records (already in offset order) merged into the log's order (module docstring)."""
    return heapq.merge(*partitions, key=LogRecord.order)


_T = TypeVar("_T")


@overload
def _field(raw: dict[str, Any], name: str, kind: type[_T], number: int, minimum: int | None = 0) -> _T: ...


@overload
def _field(raw: dict[str, Any], name: str, kind: tuple[type[_T], type[None]], number: int,
           minimum: int | None = 0) -> _T | None: ...


def _field(raw: dict[str, Any], name: str, kind: type | tuple[type, ...], number: int,
           minimum: int | None = 0) -> object:
    """`raw[name]`, checked to be of `kind` (or of the first kind, or None), as that type."""
    value = raw[name]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise BadLogLine(f"line {number}: {name!r} must be {_kinds(kind)}, not {type(value).__name__}")
    if minimum is not None and isinstance(value, int) and value < minimum:
        raise BadLogLine(f"line {number}: {name!r} must be >= {minimum}, not {value}")
    return value


def _kinds(kind: type | tuple[type, ...]) -> str:
    names = {int: "an integer", str: "a string", dict: "a JSON object", type(None): "null"}
    return " or ".join(names.get(k, k.__name__) for k in (kind if isinstance(kind, tuple) else (kind,)))


def parse_line(text: str, number: int) -> LogRecord:
    """One line of a log file; BadLogLine (naming line `number`) when it is not a record of this format."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise BadLogLine(f"line {number}: not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise BadLogLine(f"line {number}: a record is a JSON object, not {type(raw).__name__}")
    missing, unknown = [f for f in FIELDS if f not in raw], sorted(set(raw) - set(FIELDS))
    if missing or unknown:
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"unknown field(s) {', '.join(unknown)}"] if unknown else [])
        raise BadLogLine(f"line {number}: {'; '.join(parts)} (a record has {', '.join(FIELDS)})")
    topic = _field(raw, "topic", str, number)
    if topic not in TOPIC_MODELS:
        raise BadLogLine(f"line {number}: unknown topic {topic!r} (known: {', '.join(TOPIC_MODELS)})")
    return LogRecord(topic, _field(raw, "partition", int, number), _field(raw, "offset", int, number),
                     _field(raw, "timestamp", int, number), _field(raw, "key", (str, type(None)), number),
                     _field(raw, "schema", (int, type(None)), number), _field(raw, "event", dict, number))


def read_lines(lines: Iterable[str]) -> list[LogRecord]:
    """Every record of a log file, validated to the last line before any is used (an import publishes nothing of
    a file with a bad line: half a log would replay as a different history). Blank lines are skipped."""
    return [parse_line(text, number) for number, text in enumerate(lines, 1) if text.strip()]


def write_lines(records: Iterable[LogRecord]) -> Iterator[str]:
    for record in records:
        yield record.line() + "\n"


__all__ = ["FIELDS", "SPREAD_BY_KEY", "BadLogLine", "ClusterNotInLog", "LogRecord", "topic_names", "parse_time",
           "of_record", "merge", "parse_line", "read_lines", "write_lines"]
