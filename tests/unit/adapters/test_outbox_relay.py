"""The outbox relay over the in-memory outbox (the OutboxStore port's fake) and a broker that records.

What the relay adds to the store's contract: rows go out in id order with their key and a JSON content type,
are marked published only after every send was acknowledged, and an oversize row is dead-lettered instead.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from gpuplace.adapters.postgres.outbox_relay import OutboxRelay
from gpuplace.contracts import topics
from tests.fakes import FakeUnitOfWorkFactory


class RecordingBroker:
    """FastStream's KafkaBroker.publish as the relay calls it (no_confirm: a future of the acknowledgement)."""

    def __init__(self, fail: bool = False) -> None:
        self.sent: list[tuple[str, bytes, dict[str, Any]]] = []
        self.fail = fail

    async def publish(self, body: bytes, *, topic: str, key: bytes, headers: dict[str, str],
                      no_confirm: bool) -> asyncio.Future[None]:
        assert no_confirm
        acknowledged: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.fail:
            acknowledged.set_exception(ConnectionError("broker away"))
        else:
            self.sent.append((topic, key, {"body": json.loads(body), "headers": headers}))
            acknowledged.set_result(None)
        return acknowledged


async def queued(uow_factory: FakeUnitOfWorkFactory, *payloads: dict[str, Any]) -> None:
    async with uow_factory() as uow:
        for payload in payloads:
            await uow.outbox.add_outbox(topics.PLACEMENTS, f"east/{payload['pod']}", json.dumps(payload))
        await uow.commit()


async def test_rows_go_out_in_order_and_are_marked_published():
    uow_factory, broker = FakeUnitOfWorkFactory(), RecordingBroker()
    await queued(uow_factory, {"cluster": "east", "pod": "a"}, {"cluster": "east", "pod": "b"})
    relay = OutboxRelay(uow_factory, broker)
    assert await relay.run_once() == 2
    assert [(topic, key, sent["body"]["pod"]) for topic, key, sent in broker.sent] == \
        [(topics.PLACEMENTS, b"east/a", "a"), (topics.PLACEMENTS, b"east/b", "b")]
    assert all(sent["headers"] == {"content-type": "application/json"} for _, _, sent in broker.sent)
    assert await relay.run_once() == 0 and len(broker.sent) == 2  # published once


async def test_a_row_whose_send_fails_stays_unpublished():
    uow_factory = FakeUnitOfWorkFactory()
    await queued(uow_factory, {"cluster": "east", "pod": "a"})
    with pytest.raises(ConnectionError):  # OutboxRelay.run logs it and tries again
        await OutboxRelay(uow_factory, RecordingBroker(fail=True)).run_once()
    broker = RecordingBroker()
    assert await OutboxRelay(uow_factory, broker).run_once() == 1
    assert [sent["body"]["pod"] for _, _, sent in broker.sent] == ["a"]


async def test_an_oversize_row_is_dead_lettered_and_the_rest_go_on():
    uow_factory, broker = FakeUnitOfWorkFactory(), RecordingBroker()
    await queued(uow_factory, {"cluster": "east", "pod": "big", "blob": "x" * 2000}, {"cluster": "east", "pod": "b"})
    relay = OutboxRelay(uow_factory, broker, max_event_bytes=1000)
    assert await relay.run_once() == 2
    (letter_topic, _, letter), (topic, key, _) = broker.sent
    assert letter_topic == topics.DEADLETTER and letter["body"]["source_topic"] == topics.PLACEMENTS
    assert "exceeds the 1000-byte limit" in letter["body"]["reason"]
    assert (topic, key) == (topics.PLACEMENTS, b"east/b")
