"""`gpuplace topics`, the deployment's topic job (Helm hook, compose's `topics` service), on the real broker: it
creates every topic of the contracts with the partition count asked for, and a second run leaves existing topics
as they are (a rerun on upgrade must not fail, nor change what the consumer groups rely on); replication factor 0
(the chart's default) fits the cluster's brokers, and more replicas than brokers is one line saying what to change."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from gpuplace.adapters.kafka import admin_client, delete_topics
from gpuplace.contracts import topics

from .conftest import unique_name

pytestmark = pytest.mark.integration


async def _gpuplace_topics(bootstrap: str, suffix: str, *args: str, expect: int = 0) -> str:
    env = {**os.environ, "GPUPLACE_KAFKA_BOOTSTRAP": bootstrap, "GPUPLACE_TOPIC_SUFFIX": suffix}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpuplace.cli.app", "topics", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    output, _ = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == expect, output.decode()
    return output.decode()


async def _replication_factors(bootstrap: str, names: list[str]) -> dict[str, int]:
    async with admin_client(bootstrap) as admin:
        described = await admin.describe_topics(names)
    return {t["topic"]: len(t["partitions"][0]["replicas"]) for t in described if t["error_code"] == 0}


async def _partition_counts(bootstrap: str, names: list[str]) -> dict[str, int]:
    async with admin_client(bootstrap) as admin:
        described = await admin.describe_topics(names)
    return {t["topic"]: len(t["partitions"]) for t in described if t["error_code"] == 0}


async def test_topics_creates_every_topic_once(kafka_bootstrap: str) -> None:
    suffix = "." + unique_name("topics-cli")
    names = [t + suffix for t in topics.ALL_TOPICS]
    try:
        output = await _gpuplace_topics(kafka_bootstrap, suffix, "--partitions", "2")
        assert names[0] in output
        assert await _partition_counts(kafka_bootstrap, names) == dict.fromkeys(names, 2)

        await _gpuplace_topics(kafka_bootstrap, suffix, "--partitions", "3")
        assert await _partition_counts(kafka_bootstrap, names) == dict.fromkeys(names, 2)
    finally:
        await delete_topics(kafka_bootstrap, names)


async def test_replication_factor_0_fits_the_cluster_and_too_many_replicas_say_what_to_change(
        kafka_bootstrap: str) -> None:
    """The chart's default (0) works on the stack's one broker; 3 there fails the hook with one line naming the
    value to change, instead of the broker's reason once per topic."""
    async with admin_client(kafka_bootstrap) as admin:
        brokers = len((await admin.describe_cluster())["brokers"])
    suffix = "." + unique_name("topics-rf")
    names = [t + suffix for t in topics.ALL_TOPICS]
    try:
        output = await _gpuplace_topics(kafka_bootstrap, suffix, "--replication-factor", str(brokers + 1), expect=1)
        assert output.count("\n") == 1 and output.startswith("gpuplace: error: the broker refused to create "), output
        assert output.count(str(brokers + 1)) >= 1 and "kafka.topics.replicationFactor" in output, output
        assert await _replication_factors(kafka_bootstrap, names) == {}
        await _gpuplace_topics(kafka_bootstrap, suffix, "--replication-factor", "0")
        assert await _replication_factors(kafka_bootstrap, names) == dict.fromkeys(names, min(3, brokers))
    finally:
        await delete_topics(kafka_bootstrap, names)
