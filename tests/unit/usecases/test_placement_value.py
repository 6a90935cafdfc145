"""Placement: the one value a decision takes from the policy to the view, the `decided` event and the database."""

from gpuplace.usecases.cluster_view import RUNNERS_UP_KEY, SCORE_KEY, Placement
from gpuplace.usecases.ports import GpuGrant, Reservation


def test_a_placement_reserves_each_of_its_gpus_with_its_share_and_memory():
    placement = Placement("n1", (2, 5), 1000, 81559, 4000, 8192)
    assert placement.reservation("uid-1", "d-1") == Reservation(
        "uid-1", "n1", (GpuGrant(2, 81559, 1000), GpuGrant(5, 81559, 1000)), 4000, 8192, "d-1")


def test_only_a_scored_placement_gives_the_decided_event_a_score_and_runners_up():
    assert Placement("n1", (0,), 250, 20000, 500, 1024).reasons() == {}
    scored = Placement("n1", (0,), 250, 20000, 500, 1024, score=-12.5, runners_up=(("n2", -13.0), ("n3", -20.25)))
    assert scored.reasons() == {SCORE_KEY: "-12.5", RUNNERS_UP_KEY: "n2=-13, n3=-20.25"}
