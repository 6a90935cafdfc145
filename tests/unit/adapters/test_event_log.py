"""The exported log's format without a broker: a line round-trips, bad lines are named by number, the merge keeps
each partition's order and breaks timestamp ties by topic, and `--topics`/`--from` parse as documented."""

import json

import pytest

from gpuplace.adapters.event_log import (
    BadLogLine,
    LogRecord,
    merge,
    of_record,
    parse_line,
    parse_time,
    read_lines,
    topic_names,
)
from gpuplace.contracts import topics


def _record(topic: str, partition: int, offset: int, timestamp: int) -> LogRecord:
    return LogRecord(topic, partition, offset, timestamp, f"east/{topic}/{offset}", 1, {"n": offset})


def test_a_record_round_trips_through_its_line():
    body = b'{"schema":1,"name":"s\xc3\xa9"}'
    record = of_record(topics.PODS, 2, 117, 1_764_650_000_123, b"east/robots/slam-0", body)
    assert record is not None and record.schema == 1 and record.event == {"schema": 1, "name": "sé"}
    line = record.line()
    assert list(json.loads(line)) == ["topic", "partition", "offset", "timestamp", "key", "schema", "event"]
    assert parse_line(line, 1) == record
    assert record.body() == b'{"schema":1,"name":"s\xc3\xa9"}' and record.key_bytes() == b"east/robots/slam-0"


@pytest.mark.parametrize("value", [b"not json", b"[1, 2]", b"\xff", None])
def test_a_record_that_is_not_a_json_object_has_no_line(value):
    assert of_record(topics.PODS, 0, 0, 0, b"east/x", value) is None


@pytest.mark.parametrize(("line", "message"), [
    ("{", "line 3: not JSON"),
    ("[]", "line 3: a record is a JSON object, not list"),
    ('{"topic": "gpuplace.pods.v1"}', "line 3: missing partition, offset, timestamp, key, schema, event"),
    ('{"topic": "gpuplace.pods.v9", "partition": 0, "offset": 0, "timestamp": 0, "key": null, "schema": 1,'
     ' "event": {}}', "line 3: unknown topic 'gpuplace.pods.v9'"),
    ('{"topic": "gpuplace.pods.v1", "partition": -1, "offset": 0, "timestamp": 0, "key": null, "schema": 1,'
     ' "event": {}}', "line 3: 'partition' must be >= 0, not -1"),
    ('{"topic": "gpuplace.pods.v1", "partition": 0, "offset": true, "timestamp": 0, "key": null, "schema": 1,'
     ' "event": {}}', "line 3: 'offset' must be an integer, not bool"),
    ('{"topic": "gpuplace.pods.v1", "partition": 0, "offset": 0, "timestamp": 0, "key": null, "schema": 1,'
     ' "event": [], "extra": 1}', "line 3: unknown field(s) extra"),
])
def test_a_bad_line_is_refused_with_its_number(line, message):
    good = _record(topics.PODS, 0, 0, 0).line()
    with pytest.raises(BadLogLine, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        read_lines([good, "", line])


def test_merge_orders_by_timestamp_then_topic_and_never_reorders_a_partition():
    pods = [_record(topics.PODS, 0, 0, 10), _record(topics.PODS, 0, 1, 30), _record(topics.PODS, 0, 2, 20)]
    nodes = [_record(topics.NODES, 1, 0, 10), _record(topics.NODES, 1, 1, 25)]
    placements = [_record(topics.PLACEMENTS, 0, 5, 5)]
    merged = [(r.topic.split(".")[1], r.offset) for r in merge([placements, nodes, pods])]
    assert merged == [("placements", 5), ("pods", 0), ("nodes", 0), ("nodes", 1), ("pods", 1), ("pods", 2)]


def test_topics_and_times_parse_as_documented():
    assert topic_names(None) == list(topics.ALL_TOPICS)
    assert topic_names("placements,pods,gpuplace.pods.v1") == [topics.PLACEMENTS, topics.PODS]
    with pytest.raises(ValueError, match="unknown topic 'pod'"):
        topic_names("pod")
    assert parse_time("1764650000123") == 1_764_650_000_123
    assert parse_time("2026-12-02T04:00:00Z") == parse_time("2026-12-02T04:00:00") == parse_time(
        "2026-12-02T05:00:00+01:00") == 1_796_184_000_000
    with pytest.raises(ValueError, match="not a time"):
        parse_time("last tuesday")
