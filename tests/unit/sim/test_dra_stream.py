"""The seeded claim stream of `bench dra` (sim/dra_stream.py): the same for the same seed, the mix it promises,
and large enough at the bench's default size to over-ask the fleet."""

from __future__ import annotations

import pytest

from gpuplace.core.model import MILLI_PER_GPU
from gpuplace.sim import dra_stream, robotics_fleet


def test_the_same_seed_gives_the_same_stream_and_another_seed_another() -> None:
    assert dra_stream.claims(300, seed=7) == dra_stream.claims(300, seed=7)
    assert dra_stream.claims(300, seed=7) != dra_stream.claims(300, seed=8)


def test_slices_and_whole_gpus_of_every_training_size_with_one_priority() -> None:
    stream = dra_stream.claims(2000, seed=7)
    whole = [p for p in stream if dra_stream.is_whole(p)]
    slices = [p for p in stream if not dra_stream.is_whole(p)]
    assert {p.gpu.count for p in whole} == {k for k, _ in dra_stream.TRAINING}
    assert all(p.gpu.share_milli == MILLI_PER_GPU for p in whole)
    sizes = [p.gpu.memory_mib or 0 for p in slices]
    assert all(p.gpu.count == 1 for p in slices) and all(m % dra_stream.SLICE_STEP_MIB == 0 for m in sizes)
    assert 2 * 1024 <= min(sizes) and max(sizes) <= 24 * 1024
    assert 0.25 < len(whole) / len(stream) < 0.45
    assert {p.priority for p in stream} == {0}  # no preemption in kube-scheduler's run
    assert all(p.deadline_ms and p.frame_rate_hz for p in slices)  # perception pods keep their deadlines
    assert len({p.name for p in stream}) == len(stream)


def test_a_prefix_of_the_stream_draws_the_same_kinds() -> None:
    assert [dra_stream.is_whole(p) for p in dra_stream.claims(50, seed=3)] == \
        [dra_stream.is_whole(p) for p in dra_stream.claims(100, seed=3)][:50]


def test_2000_claims_over_ask_200_nodes_of_the_robotics_fleet() -> None:
    fleet = robotics_fleet.fleet(100, seed=7) + robotics_fleet.fleet(100, seed=8)
    ask = dra_stream.over_ask(dra_stream.claims(2000, seed=7), fleet)
    assert ask.fleet_gpus == 1600
    assert ask.ratio > 1.1


def test_training_scale_shrinks_the_training_share_and_refuses_more_than_every_claim():
    full, scaled = dra_stream.claims(2000, seed=7), dra_stream.claims(2000, seed=7, training_scale=0.7)
    whole = [sum(dra_stream.is_whole(p) for p in s) for s in (full, scaled)]
    assert whole[1] < whole[0] * 0.8
    with pytest.raises(ValueError, match="training jobs"):
        dra_stream.claims(10, training_scale=3.0)
