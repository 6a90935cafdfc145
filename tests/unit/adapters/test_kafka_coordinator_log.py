"""aiokafka's ERROR lines while a fresh broker elects a group coordinator (what `make demo` printed on a new
machine) come out as one INFO line saying what is happening; other coordinator errors stay errors."""

from __future__ import annotations

import logging

import pytest
from aiokafka import errors as kafka_errors

import gpuplace.adapters.kafka  # noqa: F401  # installs the filter, as every process that opens a consumer does
from gpuplace.adapters.kafka.coordinator_log import LOGGER

coordinator = logging.getLogger(LOGGER)


@pytest.mark.parametrize("error", [kafka_errors.GroupCoordinatorNotAvailableError(),
                                   kafka_errors.GroupLoadInProgressError()])
def test_an_election_in_progress_is_said_at_info(caplog: pytest.LogCaptureFixture, error: Exception) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        coordinator.error("Group Coordinator Request failed: %s", error)  # aiokafka's own call
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", f"waiting for Kafka to elect this consumer group's coordinator ({type(error).__name__}: a broker "
                 "elects one, and creates __consumer_offsets, when a group first asks); retrying")]


def test_it_is_silent_where_info_is_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        coordinator.error("Group Coordinator Request failed: %s", kafka_errors.GroupCoordinatorNotAvailableError())
    assert caplog.records == []


def test_other_coordinator_errors_stay_errors(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        coordinator.error("Group Coordinator Request failed: %s", kafka_errors.GroupAuthorizationFailedError())
    assert [r.levelname for r in caplog.records] == ["ERROR"]
