"""The paper's harness with defragmentation (defrag_simulator.py), on an eight-GPU cluster."""

import numpy as np

from gpuplace.core.model import GpuRequest, Node, Pod
from gpuplace.sim import defrag_simulator, simulator

NODES = [Node.with_gpus(f"n{i}", 32000, 65536, 2, "V100M16", 16384) for i in range(4)]
PODS = [Pod(f"s{i:02d}", 1000, 1024, GpuRequest(1, share))
        for i, share in enumerate([300, 300, 400, 400, 600, 600, 700, 200, 500, 500])] + [
    Pod(f"w{i}", 1000, 1024, GpuRequest(1, 1000)) for i in range(3)]


def test_without_a_move_budget_it_is_the_paper_harness():
    plain = simulator.run(NODES, PODS, "bestfit", 2)
    result = defrag_simulator.run(NODES, PODS, "bestfit", 2, max_moves_pct=0)
    assert (result.simulation.arrived_milli == plain.arrived_milli).all()
    assert (result.simulation.allocated_milli == plain.allocated_milli).all()
    assert result.simulation.failed_by_shape == plain.failed_by_shape
    assert (result.moved_pods, result.plans) == (0, 0)


def test_a_move_places_a_pod_the_paper_harness_drops():
    plain = simulator.run(NODES, PODS, "bestfit", 2)
    result = defrag_simulator.run(NODES, PODS, "bestfit", 2, max_moves_pct=20)
    # bestfit strands 7.5% of the 8 GPUs at 100% arrived; one move opens a whole GPU: 1.25%
    assert (plain.unallocated_pct_at(100), result.simulation.unallocated_pct_at(100)) == (7.5, 1.25)
    assert (result.moved_pods, result.plans) == (1, 1)
    assert (result.simulation.arrived_milli == plain.arrived_milli).all()


def test_moves_stay_within_the_budget_and_runs_repeat():
    for pct in (5.0, 20.0):
        result = defrag_simulator.run(NODES, PODS, "fgd", 4, max_moves_pct=pct)
        assert result.moved_pods_pct <= pct
        again = defrag_simulator.run(NODES, PODS, "fgd", 4, max_moves_pct=pct)
        assert np.array_equal(result.simulation.allocated_milli, again.simulation.allocated_milli)
        assert (result.moved_pods, result.placed_pods) == (again.moved_pods, again.placed_pods)
    allocated = result.simulation.allocated_milli
    assert (allocated <= 8000).all() and (np.diff(allocated) >= 0).all()
