"""The fleet's latency model, refitted online from latency windows and read by placement.

latency-ingest turns each window into the core's evidence (the pod's stream, the streams sharing its GPU
at that moment, the GPU's speed) and refits the model in the same transaction that stores the window;
placement reads the model whenever it re-reads a cluster. The state lives in PostgreSQL as JSON, so any
number of ingest and placement workers share one model. A class never seen starts from the model's
conservative prior (core/latency/update.py).
"""

from __future__ import annotations

from gpuplace.contracts.events import LatencyWindow
from gpuplace.core.latency import model as latency_model
from gpuplace.core.latency.speed import relative_speed
from gpuplace.core.latency.update import LatencyWindow as Evidence
from gpuplace.core.latency.update import update
from gpuplace.usecases.ports import Row
from gpuplace.usecases.repositories import UnitOfWork

MODEL_NAME = "fleet"


async def load_model(uow: UnitOfWork) -> latency_model.LatencyModel:
    state = await uow.latency.load_latency_model(MODEL_NAME)
    return latency_model.from_dict(state) if state else latency_model.DEFAULT_MODEL


async def learn(uow: UnitOfWork, event: LatencyWindow, held: Row) -> bool:
    """Refit the model with one window of a pod placed on a known GPU; False when it teaches nothing."""
    if not held["frame_rate_hz"] or event.p50_ms <= 0:
        return False
    stream = latency_model.Stream(held["frame_rate_hz"], event.workload, None, held["deadline_ms"])
    others = await uow.latency.co_runners(event.cluster, held["node"], held["gpu_index"], exclude_uid=held["uid"])
    co_runners = tuple(latency_model.Stream(r["frame_rate_hz"], r["workload"], None, r["deadline_ms"])
                       for r in others if r["frame_rate_hz"])
    evidence = Evidence(stream, co_runners, relative_speed(held["model"] or ""), event.p50_ms, event.p95_ms,
                        event.p99_ms, event.frames)
    state = await uow.latency.load_latency_model(MODEL_NAME, for_update=True)
    current = latency_model.from_dict(state) if state else latency_model.DEFAULT_MODEL
    await uow.latency.save_latency_model(MODEL_NAME, latency_model.as_dict(update(current, [evidence])))
    return True


__all__ = ["MODEL_NAME", "load_model", "learn"]
