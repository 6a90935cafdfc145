"""The fleet's stranded memory told apart (issue 42): time-stranded (a GPU whose time no stream of the mix fits)
and fragmentation-stranded (FGD's measure on the other GPUs), per GPU model; and pending pods by blocker.

Arithmetic as in tests/unit/latency: p95 = 2 + 2n ms for n det streams at 30 fps, budget 30 ms: 14 fit, so a GPU
running 14 of them has no time left for a 15th."""

import pytest

from gpuplace.core.filters.latency_room import MixTerms
from gpuplace.core.gpu_load import GpuLoad
from gpuplace.core.latency.model import ClassProfile, LatencyModel, Stream, Tail
from gpuplace.core.model import GpuRequest, Node, Pod
from gpuplace.core.snapshot import ClusterSnapshot, kind_of
from gpuplace.core.workload import typical_workload
from gpuplace.sim.fleet import FleetScenario, FleetSim, make_plan
from gpuplace.sim.fleet.kpis import stranded_split

MODEL = LatencyModel(Tail(1.0, 2.0, 0.5), Tail(1.2, 2.0, 1.0), Tail(1.3, 2.5, 1.0),
                     classes={"det": ClassProfile(4.0, 0.5)})
DET = Stream(30.0, "det", deadline_ms=1000 / 30)
H100 = "NVIDIA-H100-80GB-HBM3"
SLICE_MIB = 2048


def _charge(snapshot: ClusterSnapshot, load: GpuLoad, gpu: int, n: int) -> None:
    for i in range(n):
        snapshot.charge(0, (gpu,), 100, 128, 25, SLICE_MIB, kind_of(1, 25), None)  # 2 GiB of 80: 25 milli
        load.charge(f"p{gpu}-{i}", 0, (gpu,), DET)


def test_a_gpu_whose_time_is_taken_strands_its_memory_in_time_and_not_by_fragmentation():
    snapshot = ClusterSnapshot([Node.with_gpus("n0", 64000, 262144, 2, H100, 81920)])
    load = GpuLoad.for_snapshot(snapshot)
    _charge(snapshot, load, 0, 14)  # full in time: 80 - 28 GiB free that no det stream can use
    _charge(snapshot, load, 1, 2)  # room in time and memory
    pods = [Pod(f"s{i}", 100, 128, GpuRequest(count=1, memory_mib=SLICE_MIB), frame_rate_hz=30.0) for i in range(9)]
    pods.append(Pod("whole", 100, 128, GpuRequest(count=1, share_milli=1000)))
    workload = typical_workload(pods, snapshot.gpu_types, coverage_pct=100.0)
    split = stranded_split(snapshot, workload, load, MODEL, MixTerms.of(MODEL, [DET]))
    assert split[f"time_stranded_mib/{H100}"] == 81920 - 14 * SLICE_MIB
    # GPU 1 alone remains: the slices (0.9) use it, the whole-GPU shape (0.1) cannot
    assert split[f"fragmentation_stranded_mib/{H100}"] == pytest.approx(0.1 * (81920 - 2 * SLICE_MIB))
    # even a stream without a deadline would push GPU 0's residents past theirs; a mix without streams strands none
    assert stranded_split(snapshot, workload, load, MODEL, MixTerms.of(MODEL, [Stream(1.0, "det")]))[
        f"time_stranded_mib/{H100}"] == 81920 - 14 * SLICE_MIB
    assert stranded_split(snapshot, workload, load, MODEL, MixTerms.of(MODEL, []))[f"time_stranded_mib/{H100}"] == 0


def test_the_fleet_reports_both_stranded_measures_per_model_and_pending_pods_by_blocker():
    scenario = FleetScenario(regions=1, clusters_per_region=1, gpus_per_cluster=32, days=0.5, training_gpus=0.4)
    fleet = FleetSim(make_plan(scenario, 1), "fgd").run()["fleet"]
    by_model = fleet["stranded_by_model"]
    assert by_model and fleet["fragmentation_stranded_gib"] == pytest.approx(
        sum(v["fragmentation_gib"] for v in by_model.values()), abs=0.2)
    assert fleet["time_stranded_gib"] == pytest.approx(sum(v["time_gib"] for v in by_model.values()), abs=0.2)
    assert fleet["fragmentation_stranded_gib"] > 0 and fleet["time_stranded_gib"] >= 0
    blocked = fleet["pending_blocked_by"]
    assert set(blocked) <= {"memory", "cpu", "fragmentation", "latency", "constraint", "none"}
    assert sum(blocked.values()) > 0  # 40% of the GPUs asked by training: something waits
