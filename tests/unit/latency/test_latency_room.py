"""latency_room: the latency filter's test for a whole mix of streams on some GPUs, and with one more pod placed.

It must say exactly what latency_fit.pre_filter says for each stream alone (same arithmetic as
test_latency_fit_filter.py: p95 = 2 + 2n ms for n det streams at 30 fps, budget 30 ms: n <= 14 fit)."""

import numpy as np
import pytest

from gpuplace.core.filters import latency_fit, latency_room
from gpuplace.core.gpu_load import GpuLoad
from gpuplace.core.latency.model import DEFAULT_MODEL, ClassProfile, LatencyModel, Stream, Tail
from gpuplace.core.model import Node
from gpuplace.core.snapshot import ClusterSnapshot

MODEL = LatencyModel(Tail(1.0, 2.0, 0.5), Tail(1.2, 2.0, 1.0), Tail(1.3, 2.5, 1.0),
                     classes={"det": ClassProfile(4.0, 0.5)})
DET = Stream(30.0, "det", deadline_ms=1000 / 30)
SLOW = Stream(10.0, "det", deadline_ms=100.0)
TIGHT = Stream(60.0, "det", service_ms=6.0, deadline_ms=12.0)


def _cluster(*gpus: int, product: str = "NVIDIA-H100-80GB-HBM3") -> tuple[ClusterSnapshot, GpuLoad]:
    snapshot = ClusterSnapshot([Node.with_gpus(f"n{i}", 64000, 262144, g, product, 81559)
                                for i, g in enumerate(gpus)])
    return snapshot, GpuLoad.for_snapshot(snapshot)


def _all(snapshot: ClusterSnapshot) -> tuple[np.ndarray, np.ndarray]:
    return np.nonzero(snapshot.gpu_exists)


def test_the_mix_on_each_gpu_is_what_the_filter_says_for_each_stream_alone():
    snapshot, load = _cluster(4, 2)
    for gpu, n in ((0, 13), (1, 14), (2, 3), (3, 0)):
        for i in range(n):
            load.charge(f"a{gpu}-{i}", 0, (gpu,), DET)
    load.charge("t", 1, (0,), TIGHT)
    load.charge("s", 1, (1,), SLOW)
    rows, gpus = _all(snapshot)
    mix = [DET, SLOW, TIGHT]
    got = latency_room.fits(latency_room.gpu_terms(load, MODEL, rows, gpus), latency_room.MixTerms.of(MODEL, mix),
                            MODEL)
    for i, stream in enumerate(mix):
        want = latency_fit.pre_filter(load, MODEL, stream, snapshot.gpu_exists).feasible[rows, gpus]
        assert got[i].tolist() == want.tolist()
    assert got[0].tolist()[:4] == [True, False, True, True]  # the fourteenth det fits, the fifteenth does not


def test_a_slower_gpu_model_takes_less_of_the_default_models_mix():
    mix = latency_room.MixTerms.of(DEFAULT_MODEL, [Stream(30.0, "detection", 8.0, 33.3)])
    fast, fast_load = _cluster(1)
    slow, slow_load = _cluster(1, product="Tesla-V100-SXM2-16GB")
    for load in (fast_load, slow_load):
        for i in range(6):
            load.charge(f"p{i}", 0, (0,), Stream(30.0, "detection", 8.0, 33.3))
    one = np.array([0])
    on_fast = latency_room.fits(latency_room.gpu_terms(fast_load, DEFAULT_MODEL, one, one), mix, DEFAULT_MODEL)
    on_slow = latency_room.fits(latency_room.gpu_terms(slow_load, DEFAULT_MODEL, one, one), mix, DEFAULT_MODEL)
    assert on_fast[0, 0] >= on_slow[0, 0]


def test_a_bad_margin_is_refused():
    with pytest.raises(ValueError, match="margin"):
        latency_room.MixTerms.of(MODEL, [DET], margin=1.0)
