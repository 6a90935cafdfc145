"""The robotics scenario on a small fleet: the latency-aware policy keeps deadlines while packing."""

import pytest

from gpuplace.sim.scenarios.robotics import RoboticsScenario, run_robotics_scenario

SMALL = RoboticsScenario(n_nodes=4, n_pods=300, mean_lifetime_s=600.0, window_s=60.0)


@pytest.fixture(scope="module")
def results():
    return {r["policy"]: r for r in run_robotics_scenario(["exclusive", "fgd", "gpuplace"], seed=0, scenario=SMALL)}


def test_every_policy_sees_the_same_arrivals(results):
    assert {r["arrived_pods"] for r in results.values()} == {300}
    assert {r["gpus"] for r in results.values()} == {32}


def test_exclusive_runs_one_pod_per_gpu(results):
    assert results["exclusive"]["pods_per_gpu"] == pytest.approx(1.0)


def test_latency_aware_keeps_deadlines_and_packs_at_least_1_8_times_exclusive(results):
    house, alone = results["gpuplace"], results["exclusive"]
    assert house["slo_attainment"] >= 0.995
    assert house["pods_per_gpu"] >= 1.8 * alone["pods_per_gpu"]
    assert house["pods_per_fleet_gpu"] >= 1.8 * alone["pods_per_fleet_gpu"]


def test_fgd_packs_by_memory_alone_and_breaks_deadlines(results):
    assert results["fgd"]["slo_attainment"] < results["gpuplace"]["slo_attainment"]
    assert results["fgd"]["deadline_miss_frames_pct"] > results["gpuplace"]["deadline_miss_frames_pct"]


def test_the_learned_work_fractions_approach_the_truth(results):
    # sim/robotics_fleet.py: detection 0.5, segmentation 0.6, slam 0.4, depth 0.55, occupancy 0.7
    learned = results["gpuplace"]["learned_work_fraction"]
    assert learned["detection-yolo"] == pytest.approx(0.5, abs=0.1)
    assert learned["slam"] == pytest.approx(0.4, abs=0.1)


def test_same_seed_same_result(results):
    again = run_robotics_scenario(["gpuplace"], seed=0, scenario=SMALL)[0]
    assert again == results["gpuplace"]


def test_any_policy_composes_with_the_latency_filter():
    [result] = run_robotics_scenario(["bestfit+latency"], seed=1, scenario=RoboticsScenario(n_nodes=2, n_pods=80))
    assert result["policy"] == "bestfit+latency" and result["slo_attainment"] >= 0.995


def test_unknown_policies_are_refused_by_name():
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        run_robotics_scenario(["nope"], seed=0, scenario=SMALL)
