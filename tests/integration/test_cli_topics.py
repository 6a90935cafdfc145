"""`gpuplace topics`, the deployment's topic job (Helm hook, compose's `topics` service), on the real broker: it
creates every topic of the contracts with the partition count asked for, and a second run leaves existing topics
as they are (a rerun on upgrade must not fail, nor change what the consumer groups rely on)."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from gpuplace.adapters.kafka import admin_client, delete_topics
from gpuplace.contracts import topics

from .conftest import unique_name

pytestmark = pytest.mark.integration


async def _gpuplace_topics(bootstrap: str, suffix: str, *args: str) -> str:
    env = {**os.environ, "GPUPLACE_KAFKA_BOOTSTRAP": bootstrap, "GPUPLACE_TOPIC_SUFFIX": suffix}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpuplace.cli.app", "topics", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    output, _ = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, output.decode()
    return output.decode()


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
