"""aiokafka's coordinator lookups while a broker elects a group coordinator, said at INFO for what they are.

A consumer group's first lookup on a fresh broker finds no coordinator: the broker creates __consumer_offsets and
elects one, a second or two. aiokafka logs each retry meanwhile at ERROR (`Group Coordinator Request failed:
[Error 15] CoordinatorNotAvailableError`), which a new user running `make demo` reads as a failure. Nothing has
failed: the lookup retries until the coordinator is there. This filter, on aiokafka's coordinator logger itself
(so it holds whatever handlers the process has), turns those records into one INFO line saying so, dropped where
the logger is not enabled for INFO (the demo logs warnings only). Other errors of that logger pass as they are.
"""

from __future__ import annotations

import logging

from aiokafka import errors as kafka_errors

LOGGER = "aiokafka.consumer.group_coordinator"
# the answers of a broker whose coordinator is not there yet: none (15), loading its offsets (14), moved (16)
ELECTION = (kafka_errors.GroupCoordinatorNotAvailableError, kafka_errors.GroupLoadInProgressError,
            kafka_errors.NotCoordinatorForGroupError)
MESSAGE = ("waiting for Kafka to elect this consumer group's coordinator (%s: a broker elects one, and creates "
           "__consumer_offsets, when a group first asks); retrying")


class CoordinatorElection(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        cause = next((arg for arg in args if isinstance(arg, ELECTION)), None)
        if record.levelno <= logging.INFO or cause is None:
            return True
        record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
        record.msg, record.args = MESSAGE, (type(cause).__name__,)
        return logging.getLogger(record.name).isEnabledFor(logging.INFO)


_FILTER = CoordinatorElection()


def install() -> None:
    """Put the filter on aiokafka's coordinator logger (once: adding the same filter again keeps one)."""
    logging.getLogger(LOGGER).addFilter(_FILTER)


__all__ = ["ELECTION", "LOGGER", "CoordinatorElection", "install"]
