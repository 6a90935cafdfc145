"""Sends kept in flight (adapters/kafka.Acknowledgements): how a watcher publishes a burst without one broker
round trip per record, and still ends when a send fails."""

import asyncio

import pytest
from aiokafka.errors import KafkaTimeoutError

from gpuplace.adapters.kafka import Acknowledgements


async def test_sends_stay_in_flight_up_to_the_window_then_wait_for_the_oldest():
    acks = Acknowledgements(window=2)
    loop = asyncio.get_running_loop()
    futures = [loop.create_future() for _ in range(3)]
    await acks.sent(futures[0])
    await acks.sent(futures[1])  # two in flight: nothing waited for
    third = asyncio.create_task(acks.sent(futures[2]))
    await asyncio.sleep(0.01)
    assert not third.done()  # the window is full: it waits for the oldest
    futures[0].set_result(None)
    await asyncio.wait_for(third, 1)


async def test_a_failed_send_ends_the_publisher_even_when_nothing_more_is_sent():
    acks = Acknowledgements(window=8)
    failed = asyncio.create_task(acks.failed())
    ack = asyncio.get_running_loop().create_future()
    await acks.sent(ack)
    ack.set_exception(KafkaTimeoutError())
    with pytest.raises(KafkaTimeoutError):
        await asyncio.wait_for(failed, 1)
    with pytest.raises(KafkaTimeoutError):  # and the next send refuses
        await acks.sent(asyncio.get_running_loop().create_future())
