"""CPU per record a gpuplace producer spends at a steady rate, for several linger_ms (adapters/kafka LINGER_MS).

    set -a; . /tmp/gpuplace-stack/env; set +a
    python bench/producer_linger.py --linger-ms 0,5,10,20 --rounds 3

Each round and linger makes a producer as the services do (make_broker: TLS and SASL from the environment,
idempotent, keyed by cluster), sends `--records` JSON records of ~450 bytes through publish_json at `--rate` a second
(a watcher in a burst), keeping their acknowledgements in flight as the watcher does, and prints this process's
CPU seconds per record. The topic is its own and deleted after.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

import uvloop

from gpuplace.adapters.kafka import publish_json
from gpuplace.adapters.kafka.connection import make_broker
from gpuplace.adapters.kafka.topics import delete_topics
from gpuplace.settings import Settings

BODY = b'{"cluster":"east","kind":"pending","pod":"' + b"a" * 400 + b'"}'


async def cpu_per_record(linger_ms: int, records: int, rate: float) -> float:
    settings = Settings()
    topic = f"gpuplace.lingerbench.v1.{uuid.uuid4().hex[:6]}"
    broker = make_broker(settings.kafka, linger_ms=linger_ms)
    await broker.start()
    try:
        await publish_json(broker, BODY, topic=topic, key=b"east/warm-up")
        started, acks = time.process_time(), []
        for i in range(records):
            acks.append(await publish_json(broker, BODY, topic=topic, key=b"east/p%d" % (i % 50), no_confirm=True))
            await asyncio.sleep(1 / rate)
        await asyncio.gather(*acks)
        return (time.process_time() - started) / records
    finally:
        await broker.stop()
        await delete_topics(settings.kafka, [topic])


async def main(args: argparse.Namespace) -> None:
    lingers = [int(v) for v in args.linger_ms.split(",")]
    for round_ in range(1, args.rounds + 1):
        for linger in lingers:
            seconds = await cpu_per_record(linger, args.records, args.rate)
            print(f"round {round_}  linger_ms {linger:>3}  {seconds * 1e6:6.0f} us of CPU a record", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--linger-ms", default="0,5,10,20")
    parser.add_argument("--records", type=int, default=3000)
    parser.add_argument("--rate", type=float, default=600.0, help="records a second, spread evenly")
    parser.add_argument("--rounds", type=int, default=3)
    uvloop.run(main(parser.parse_args()))
