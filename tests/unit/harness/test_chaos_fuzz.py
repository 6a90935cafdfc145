"""The chaos bench's fuzz corpus: every record is one the consumer must dead-letter, and a seed replays it."""

from __future__ import annotations

from collections import Counter

import pytest
from pydantic import ValidationError

from gpuplace.contracts.events import TOPIC_MODELS
from gpuplace.harness.chaos_fuzz import FUZZ_TOPICS, KINDS, corpus

CLUSTERS = ("east-ab12", "west-ab12")


@pytest.fixture(scope="module")
def records():
    return corpus(600, clusters=CLUSTERS, seed=11)


def test_every_record_fails_its_topics_model(records):
    for record in records:
        with pytest.raises(ValidationError):
            TOPIC_MODELS[record.topic].model_validate_json(record.value)


def test_the_same_seed_gives_the_same_bytes_and_another_seed_does_not(records):
    again = corpus(600, clusters=CLUSTERS, seed=11)
    assert [(r.topic, r.key, r.value, r.headers) for r in again] == [(r.topic, r.key, r.value, r.headers)
                                                                     for r in records]
    assert [r.value for r in corpus(50, clusters=CLUSTERS, seed=12)] != [r.value for r in records[:50]]


def test_records_fit_kafkas_default_limit_and_are_told_apart_by_digest(records):
    assert max(len(r.key) + len(r.value) for r in records) < 1_000_000
    assert len({r.sha256 for r in records}) == len(records)  # each dead letter names exactly one record


def test_every_kind_and_topic_is_drawn_and_keys_name_the_runs_clusters(records):
    assert set(KINDS) <= {r.kind for r in records[:len(KINDS)]}
    assert {r.topic for r in records} == set(FUZZ_TOPICS)
    assert {r.cluster for r in records} == set(CLUSTERS)
    assert all(r.key.startswith(f"{r.cluster}/".encode()) for r in records)
    oversize = [r for r in records if r.kind == "oversize"]
    assert oversize and all(800_000 < len(r.value) < 1_000_000 for r in oversize)


def test_bad_bytes_come_with_and_without_a_json_content_type(records):
    headers = Counter(bool(r.headers) for r in records if r.kind in ("random-bytes", "truncated-json", "bad-json"))
    assert headers[True] and headers[False]


def test_the_brief_bounds_are_in_the_corpus():
    values = b"\n".join(r.value for r in corpus(2000, clusters=CLUSTERS, seed=5) if r.kind == "out-of-bounds")
    for literal in (b'"priority":2147483648', b'"cpu_milli":9223372036854775807', b"1e400", b"NaN", b":-1"):
        assert literal in values, literal


def test_no_cluster_is_refused():
    with pytest.raises(ValueError, match="cluster"):
        corpus(1, clusters=(), seed=1)
