"""The pod lifecycle table (usecases/pod_states.py): the states the database allows, and what the table says."""

from __future__ import annotations

import re

import pytest

from gpuplace.adapters.postgres.tables import pods
from gpuplace.usecases.pod_states import (
    HOLDING,
    INITIAL,
    NEXT,
    TRACKED,
    WAITING,
    IllegalTransition,
    PodState,
    check,
    check_initial,
    sources,
)


def test_the_enum_is_exactly_the_states_the_pods_table_allows() -> None:
    constraint = next(c for c in pods.constraints if getattr(c, "name", None) == "pod_state_known")
    allowed = set(re.findall(r"'(\w+)'", str(constraint.sqltext)))  # type: ignore[attr-defined]
    assert allowed == {s.value for s in PodState}


def test_every_pod_can_leave_and_only_deleted_and_promised_are_ends() -> None:
    assert set(NEXT) == set(PodState)
    ends = {s for s, nexts in NEXT.items() if not nexts}
    assert ends == {PodState.DELETED, PodState.PROMISED}
    assert all(PodState.DELETED in NEXT[s] for s in PodState if s not in ends)


def test_every_state_is_reached_from_a_first_seen_state() -> None:
    reached, frontier = set(INITIAL), list(INITIAL)
    while frontier:
        for nxt in NEXT[frontier.pop()] - reached:
            reached.add(nxt)
            frontier.append(nxt)
    assert reached == set(PodState)


@pytest.mark.parametrize(("current", "target"), [("pending", PodState.RESERVED), ("reserved", PodState.BOUND),
                                                 ("reserved", PodState.PENDING), ("bound", PodState.BOUND),
                                                 ("invalid", PodState.BOUND), ("unschedulable", PodState.DELETED)])
def test_the_moves_placement_makes_are_allowed(current: str, target: PodState) -> None:
    check(current, target)
    assert PodState(current) in sources(target)


@pytest.mark.parametrize(("current", "target"), [("bound", PodState.RESERVED), ("deleted", PodState.PENDING),
                                                 ("reserved", PodState.RESERVED), ("invalid", PodState.RESERVED),
                                                 ("promised", PodState.BOUND), ("pending", PodState.PROMISED)])
def test_a_move_the_table_does_not_name_is_refused(current: str, target: PodState) -> None:
    with pytest.raises(IllegalTransition, match=f"a pod {current} cannot become {target.value}"):
        check(current, target)
    assert PodState(current) not in sources(target)


def test_only_pending_bound_and_promised_rows_are_inserted() -> None:
    for state in INITIAL:
        check_initial(state)
    with pytest.raises(IllegalTransition):
        check_initial("reserved")


def test_the_groups_callers_read_by() -> None:
    assert set(WAITING) == {PodState.PENDING, PodState.UNSCHEDULABLE}
    assert set(HOLDING) == {PodState.RESERVED, PodState.BOUND, PodState.PROMISED}
    assert set(TRACKED) == set(WAITING) | {PodState.RESERVED, PodState.BOUND}
