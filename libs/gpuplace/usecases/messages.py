"""Internal messages between placement's handlers, and the bus that delivers them (Cosmic Python's message bus).

Placement, defragmentation and scale hints do not call one another: each publishes what happened, once it is
committed, and the others handle it. Handlers of one message run one after another, in the order they were
subscribed, and `publish` returns when the last is done: the order is deterministic (the composition root,
gpuplace/bootstrap.py, subscribes the defragmenter before placement, so a loaded cluster's half-done plans are
settled before its reserved pods are bound), and a handler that needs a cluster takes it with `Clusters.held`,
which a handler run inside its publisher's hold of that cluster re-enters (usecases/clusters.py).

These messages never leave the process: what other services see is the outbox (usecases/decision_log.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from gpuplace.usecases.ports import PodRow


@dataclass(frozen=True)
class ClusterLoaded:
    """A cluster was read from the database by this worker (a first event, a restart, partitions regained).
    Published inside the loader's hold of the cluster: its handlers resume what the last process left."""

    cluster: str


@dataclass(frozen=True)
class PodWaits:
    """A pod fits nowhere (committed `unschedulable`): room may be made for it (defragmentation) or asked
    for (scale hints). `nodes_known`: the cluster's view has nodes to plan on."""

    row: PodRow
    nodes_known: bool


@dataclass(frozen=True)
class PlanStarted:
    """A defragmentation plan is being made for pod `uid`: until it settles, the plan (not placement) binds the
    pod if it comes out reserved, and a deletion leaves its hold to the plan."""

    cluster: str
    uid: str


SettledAs = Literal["completed", "aborted", "released", "dropped"]


@dataclass(frozen=True)
class PlanSettled:
    """The plan for pod `uid` settled: `completed` (the beneficiary is reserved and is to be bound), `aborted`
    or `released` (completed without a bind: its beneficiary deleted mid-plan, its hold released, or the plan
    settled by another worker); after those two the GPUs the plan held are free, so the waiting pods are tried
    again. `dropped`: nothing was reserved (infeasible, stale, or interrupted). `aborted` and `released` are
    published inside the plan's hold of the cluster."""

    cluster: str
    uid: str
    outcome: SettledAs


Message = ClusterLoaded | PodWaits | PlanStarted | PlanSettled
_M = TypeVar("_M", ClusterLoaded, PodWaits, PlanStarted, PlanSettled)
Handler = Callable[[Any], Awaitable[None]]


class MessageBus:
    """Delivers each message to the handlers of its type, awaited one after another in subscription order."""

    def __init__(self) -> None:
        self._handlers: dict[type[Any], list[Handler]] = {}

    def subscribe(self, kind: type[_M], handler: Callable[[_M], Awaitable[None]]) -> None:
        self._handlers.setdefault(kind, []).append(handler)

    async def publish(self, message: Message) -> None:
        for handler in self._handlers.get(type(message), ()):
            await handler(message)


__all__ = ["ClusterLoaded", "Handler", "Message", "MessageBus", "PlanSettled", "PlanStarted", "PodWaits",
           "SettledAs"]
