"""The paper's arrival sequence: shuffle, resample to 130%, node order."""

import numpy as np
import pytest

from gpuplace.sim.arrivals import plan_arrivals


def test_resampling_stops_before_the_target_is_passed():
    # one 1-GPU pod (1000m) on 4 GPUs: target 1.3 * 4000 = 5200m; the trace asks 1000m.
    # each draw adds 1000m while 1000 + running total <= 5200: 2000, 3000, 4000, 5000; the next would
    # reach 6000 > 5200 and stops the loop. 1 trace pod + 4 resampled = 5 arrivals, 5000m.
    plan = plan_arrivals(np.array([1000]), np.array([1000]), 1, 4000, np.random.default_rng(1))
    assert len(plan.sequence) == 5 and plan.n_from_trace == 1


def test_resampling_tests_the_per_gpu_share_like_the_reference():
    # one 8-GPU pod (8000m, 1000m per GPU) on 8 GPUs: target 10400m, the trace asks 8000m.
    # the reference tests 8000 + 1000 (per GPU) = 9000 <= 10400 and appends the whole 8000m pod:
    # 16000m arrive, 200% of capacity; the next test, 16000 + 1000 > 10400, stops.
    plan = plan_arrivals(np.array([8000]), np.array([1000]), 1, 8000, np.random.default_rng(1))
    assert len(plan.sequence) == 2


def test_a_trace_above_the_target_is_thinned():
    # four 1-GPU pods (4000m) on 2 GPUs: target 2600m; pods are dropped at random until <= 2600m: 2 remain
    plan = plan_arrivals(np.full(4, 1000), np.full(4, 1000), 1, 2000, np.random.default_rng(3))
    assert len(plan.sequence) == 2 and len(set(plan.sequence.tolist())) == 2


def test_the_plan_is_a_function_of_the_generator_seed():
    def plan(seed):
        return plan_arrivals(np.arange(50) * 10, np.arange(50) * 10, 30, 20000, np.random.default_rng(seed))

    assert np.array_equal(plan(42).sequence, plan(42).sequence)
    assert np.array_equal(plan(42).node_order, plan(42).node_order)
    assert not np.array_equal(plan(42).sequence, plan(43).sequence)
    assert sorted(plan(42).node_order.tolist()) == list(range(30))
    assert sorted(plan(42).sequence[:50].tolist()) == list(range(50))  # the trace itself, shuffled


def test_bad_inputs_are_refused():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError):
        plan_arrivals(np.array([]), np.array([]), 1, 1000, rng)
    with pytest.raises(ValueError):
        plan_arrivals(np.array([1]), np.array([1, 2]), 1, 1000, rng)


def test_a_trace_without_gpu_requests_is_not_resampled():
    plan = plan_arrivals(np.zeros(3, dtype=int), np.zeros(3, dtype=int), 1, 1000, np.random.default_rng(0))
    assert len(plan.sequence) == 3
