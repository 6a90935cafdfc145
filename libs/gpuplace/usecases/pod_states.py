"""The states a pod's row takes in the fleet state, and the moves between them, in one table.

A pod's `state` column was a string written from a dozen places (placement, defragmentation, reconciliation),
each knowing its own part of the lifecycle. Here the whole of it is written down once, as h11's `_state.py`
writes down HTTP/1.1's: the states as an enum and, for each, the states it may move to. Both implementations of
the state repository (PostgreSQL, and the unit tests' fake) refuse any other move with IllegalTransition: a move
the table does not name is a bug (a pod reserved twice, a deleted pod brought back), and failing the transaction
that attempts it keeps the database as it was, where writing it would leave GPUs charged to the wrong pod.

The main road is pending -> reserved -> bound -> deleted. A pod that fits nowhere waits as unschedulable and is
tried again; a failed bind puts it back to pending. Every pod may end deleted (it went away), and one another
scheduler bound becomes bound from any waiting state. `promised` rows are not pods but places a defragmentation
plan keeps for a victim's replacement (usecases/defrag): they leave by being deleted, never by a state change.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping


class PodState(enum.StrEnum):
    """A pod row's state (the pods table's `state` column; its CHECK constraint lists the same values)."""

    PENDING = "pending"
    """Seen, not decided yet; or its bind failed and it waits for its next try."""
    UNSCHEDULABLE = "unschedulable"
    """Decided: fits nowhere now. Waits in the queue, tried again when the cluster changes."""
    INVALID = "invalid"
    """Its GPU request cannot be read. Waits until it is deleted, or bound by someone else."""
    RESERVED = "reserved"
    """Its GPUs are taken in the database; the bind is in flight (or, for a plan's beneficiary, the evictions)."""
    BOUND = "bound"
    """Runs on its node: bound by gpuplace, or by another scheduler and charged where it runs."""
    PROMISED = "promised"
    """Not a pod: a place a defragmentation plan keeps for a moved pod's replacement."""
    DELETED = "deleted"
    """Gone. Kept (with its decisions) for `gpuplace explain`; a plan in flight may still hold its GPUs."""


INITIAL: frozenset[PodState] = frozenset({PodState.PENDING, PodState.BOUND, PodState.PROMISED})
"""The states a row is inserted in: a pod seen pending, one seen bound already, a plan's promise."""

NEXT: Mapping[PodState, frozenset[PodState]] = {
    # decided: reserved, fits nowhere, or its request unreadable; bound by another scheduler; deleted
    PodState.PENDING: frozenset({PodState.RESERVED, PodState.UNSCHEDULABLE, PodState.INVALID, PodState.BOUND,
                                 PodState.DELETED}),
    # tried again: reserved, or still fitting nowhere (with a new reason); bound by another scheduler; deleted
    PodState.UNSCHEDULABLE: frozenset({PodState.RESERVED, PodState.UNSCHEDULABLE, PodState.BOUND,
                                       PodState.DELETED}),
    PodState.INVALID: frozenset({PodState.BOUND, PodState.DELETED}),
    # bound; its bind failed (pending again) or found it gone (deleted); a plan aborted (unschedulable)
    PodState.RESERVED: frozenset({PodState.BOUND, PodState.PENDING, PodState.UNSCHEDULABLE, PodState.DELETED}),
    # found running on another node than recorded (charged there now), or on a node that arrived late
    PodState.BOUND: frozenset({PodState.BOUND, PodState.DELETED}),
    PodState.PROMISED: frozenset(),
    PodState.DELETED: frozenset(),
}
"""For each state, the states a pod in it may move to (repositories.Pods.set_pod_state)."""

WAITING: tuple[PodState, ...] = (PodState.PENDING, PodState.UNSCHEDULABLE)
"""Pods in the queue: not placed, to be tried."""
PLACED: tuple[PodState, ...] = (PodState.RESERVED, PodState.BOUND)
"""Pods with a node: reserved there (the bind in flight) or bound."""
HOLDING: tuple[PodState, ...] = (*PLACED, PodState.PROMISED)
"""Rows whose allocations the cluster's view charges."""
TRACKED: tuple[PodState, ...] = (*WAITING, *PLACED)
"""Pods that hold resources or a queue slot: what reconciliation compares with the apiserver."""


class IllegalTransition(RuntimeError):
    """A move NEXT does not name: a bug in the caller, raised before anything is written."""


def sources(target: PodState) -> frozenset[PodState]:
    """The states a pod may be in to move to `target` (the guard of the UPDATE that moves it)."""
    return _SOURCES[target]


def check(current: str, target: PodState) -> None:
    """Raise IllegalTransition unless a pod in `current` may move to `target`."""
    if PodState(current) not in _SOURCES[target]:
        raise IllegalTransition(f"a pod {current} cannot become {target}; it may become "
                                f"{', '.join(sorted(NEXT[PodState(current)])) or 'nothing else'}")


def check_initial(state: str) -> None:
    """Raise IllegalTransition unless a row may be inserted in `state`."""
    if PodState(state) not in INITIAL:
        raise IllegalTransition(f"a pod is not recorded {state} when first seen (only {', '.join(sorted(INITIAL))})")


_SOURCES: Mapping[PodState, frozenset[PodState]] = {
    target: frozenset(s for s, nexts in NEXT.items() if target in nexts) for target in PodState}

__all__ = ["HOLDING", "INITIAL", "NEXT", "PLACED", "TRACKED", "WAITING", "IllegalTransition", "PodState", "check",
           "check_initial", "sources"]
