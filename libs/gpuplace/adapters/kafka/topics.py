"""Topics on the broker: created up front with one partition count for the topics read together, listed,
deleted, and the broker count (what a replication factor can be).

Topics read together must have one partition count (check_copartitioned): a cluster's records are on the same
partition number of every topic (partitioning.py), and the range assignor hands a worker those numbers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence

from aiokafka import errors as kafka_errors
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from gpuplace.adapters.kafka.connection import Kafka, client_options, reaching
from gpuplace.settings import ConfigurationError


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


async def delete_topics(kafka: Kafka, names: Iterable[str], *, settle_s: float = 10.0) -> list[str]:
    """Delete those of `names` the broker has; return them.

    Runs, benches and tests create topics under a suffix of their own. Left behind, they add up: a broker
    holding thousands of partitions takes minutes to restart, which is itself an outage for every service.
    A deletion is done when the broker no longer lists the topic, not when the controller accepted it: the
    metadata reaches the broker moments later, and a caller that lists topics at once may still see it (a flaky
    check in tests/integration/test_pipeline_e2e.py). Waits up to `settle_s` for that.
    """
    async with admin_client(kafka) as admin:
        present = sorted(set(names) & set(await admin.list_topics()))
        if present:
            await admin.delete_topics(present)
            deadline = asyncio.get_running_loop().time() + settle_s
            while set(present) & set(await admin.list_topics()) and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.1)
        return present


__all__ = ["admin_client", "broker_count", "check_copartitioned", "delete_topics", "ensure_copartitioned",
           "ensure_topics", "list_topics"]
