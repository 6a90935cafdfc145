"""Unit tests see no Kafka settings of the shell that runs them.

The local stack's env file names its Kafka with a user, a password and a CA file (`GPUPLACE_KAFKA_*`), and a
developer's shell often has it sourced; a unit test that builds Settings() or a client from a bare bootstrap list
(adapters/kafka) would then test the stack's settings instead of its own, and pass or fail by the shell.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _no_kafka_settings_from_the_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith(("GPUPLACE_KAFKA_", "GPUPLACE_STACK_KAFKA_"))]:
        monkeypatch.delenv(name)
