"""LatencyFit: a pod goes on a GPU only if every pod there keeps p95 within deadline less the margin.

Arithmetic for every case: p95 = max(1.2 s, 2 + W) on the reference GPU (H100, speed 1); a "det" frame
takes s = 4 ms of which half is GPU work (b = 2 ms), so n det streams at 30 fps give W = 2n ms and
p95 = 2 + 2n ms. A 33.3 ms deadline with a 10% margin leaves a budget of 30 ms: n <= 14.
"""

import numpy as np
import pytest

from gpuplace.core.filters import latency_fit
from gpuplace.core.framework.interface import Code
from gpuplace.core.gpu_load import GpuLoad
from gpuplace.core.latency.model import ClassProfile, LatencyModel, Stream, Tail
from gpuplace.core.model import Node
from gpuplace.core.snapshot import ClusterSnapshot

MODEL = LatencyModel(Tail(1.0, 2.0, 0.5), Tail(1.2, 2.0, 1.0), Tail(1.3, 2.5, 1.0),
                     classes={"det": ClassProfile(4.0, 0.5)})
DET = Stream(30.0, "det", deadline_ms=1000 / 30)


def cluster(*gpus_per_node, product="NVIDIA-H100-80GB-HBM3"):
    snapshot = ClusterSnapshot([Node.with_gpus(f"n{i}", 64000, 262144, g, product, 81559)
                                for i, g in enumerate(gpus_per_node)])
    return snapshot, GpuLoad.for_snapshot(snapshot)


def fill(load, node, gpu, n, stream=DET, prefix="p"):
    for i in range(n):
        load.charge(f"{prefix}{node}-{gpu}-{i}", node, (gpu,), stream)


def check(snapshot, load, stream=DET, margin=0.1, model=MODEL):
    return latency_fit.pre_filter(load, model, stream, snapshot.gpu_exists, margin=margin)


def test_the_fourteenth_stream_fits_and_the_fifteenth_does_not():
    snapshot, load = cluster(2)
    fill(load, 0, 0, 13)  # with the new pod: 14 streams, W = 28, p95 = 30 <= 30
    fill(load, 0, 1, 14)  # with the new pod: 15 streams, W = 30, p95 = 32 > 30
    result = check(snapshot, load)
    assert result.feasible[0].tolist() == [True, False]
    assert result.p95_ms[0].tolist() == pytest.approx([30.0, 32.0])
    assert result.budget_ms[0, 1] == pytest.approx(30.0)


def test_a_wider_margin_admits_less():
    snapshot, load = cluster(1)
    fill(load, 0, 0, 13)  # p95 30 with the new pod: inside 90% of 33.3, not inside 80% (26.7)
    assert check(snapshot, load, margin=0.1).feasible[0, 0]
    assert not check(snapshot, load, margin=0.2).feasible[0, 0]


def test_a_pod_without_deadline_must_still_keep_its_co_runners_within_theirs():
    snapshot, load = cluster(1)
    fill(load, 0, 0, 14)
    batch = Stream(30.0, "det")  # no deadline of its own, but adds 2 ms to W: the residents get 32 > 30
    assert not check(snapshot, load, stream=batch).feasible[0, 0]
    snapshot2, load2 = cluster(1)
    fill(load2, 0, 0, 20, stream=batch, prefix="b")  # nobody there has a deadline: no constraint but load
    assert check(snapshot2, load2, stream=batch).feasible[0, 0]


def test_an_overloaded_gpu_admits_no_deadline():
    snapshot, load = cluster(1)
    fill(load, 0, 0, 16, stream=Stream(30.0, "det"), prefix="b")  # load 16 x 2 x 30 / 1000 = 0.96
    tight = Stream(30.0, "det", deadline_ms=1000.0)  # 17 streams: load 1.02, unbounded latency
    result = check(snapshot, load, stream=tight)
    assert not result.feasible[0, 0] and np.isinf(result.p95_ms[0, 0])
    assert result.load_fraction[0, 0] == pytest.approx(1.02)


def test_status_names_the_best_gpu_and_its_numbers():
    snapshot, load = cluster(2)
    fill(load, 0, 0, 14)
    fill(load, 0, 1, 15)
    status = latency_fit.status(check(snapshot, load), 0)
    assert status.code == Code.UNSCHEDULABLE
    assert "GPU 0, predicted p95 32.0 ms > 30.0 ms" in status.reasons[0]
    assert latency_fit.mask(check(snapshot, load)).tolist() == [False]


def test_a_gpu_too_slow_for_the_pod_even_alone_is_unresolvable():
    # on a V100 (0.35): s = 12 / 0.35 = 34.3 ms, p95 alone = 1.2 x 34.3 = 41 ms > 30 ms
    snapshot, load = cluster(2, product="Tesla-V100-SXM2-16GB")
    slow = Stream(30.0, "det", service_ms=12.0, deadline_ms=1000 / 30)
    status = latency_fit.status(check(snapshot, load, stream=slow), 0)
    assert status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def test_padded_gpu_slots_are_never_feasible():
    snapshot, load = cluster(1, 2)
    assert check(snapshot, load).feasible.tolist() == [[True, False], [True, True]]


def test_margin_is_validated():
    snapshot, load = cluster(1)
    with pytest.raises(ValueError):
        check(snapshot, load, margin=1.0)


def _random_fleet(rng, n_nodes=40, gpus=4):
    """Nodes of two GPU models, each GPU holding 0-12 random streams of three classes, some without a deadline
    or a service time of their own: loads from idle to overloaded."""
    snapshot = ClusterSnapshot([Node.with_gpus(f"n{i}", 64000, 262144, gpus,
                                               ("NVIDIA-H100-80GB-HBM3", "Tesla-V100-SXM2-16GB")[i % 2], 16384)
                                for i in range(n_nodes)])
    load = GpuLoad.for_snapshot(snapshot)
    for node in range(n_nodes):
        for gpu in range(gpus):
            for k in range(int(rng.integers(0, 13))):
                load.charge(f"p{node}-{gpu}-{k}", node, (gpu,), _random_stream(rng))
    return snapshot, load


def _random_stream(rng):
    fps = float(rng.choice([10.0, 15.0, 30.0, 60.0]))
    return Stream(fps, str(rng.choice(["det", "seg", "unknown"])),
                  None if rng.random() < 0.3 else float(rng.uniform(0.5, 8.0)),
                  None if rng.random() < 0.2 else 1000.0 / fps * float(rng.uniform(0.8, 3.0)))


MODELS = (MODEL, LatencyModel(Tail(1.0, 2.0, 0.5), Tail(1.36, 2.4, 1.0), Tail(1.45, 2.4, 1.01), max_load=0.9,
                              classes={"det": ClassProfile(4.0, 0.5), "seg": ClassProfile(9.0, 0.8)}))


@pytest.mark.parametrize("model", MODELS)
def test_the_capped_check_admits_exactly_where_the_solved_busy_period_keeps_every_budget(model):
    """pre_filter decides without solving for the busy period (W <= W_cap iff f(W_cap) <= W_cap); the solved
    figures it explains with must agree on every GPU, save for a p95 within 1e-9 of its budget."""
    rng = np.random.default_rng(3)
    for _ in range(4):
        snapshot, load = _random_fleet(rng)
        for _ in range(25):
            stream = _random_stream(rng)
            result = check(snapshot, load, stream=stream, model=model)
            solved = snapshot.gpu_exists & (result.p95_ms <= result.budget_ms)
            boundary = np.isclose(result.p95_ms, result.budget_ms, rtol=1e-9, atol=0.0)
            assert (result.feasible == solved)[~boundary].all()
            assert 0.05 < solved.mean() < 0.95  # both answers occur


def test_the_residents_terms_follow_charges_and_refunds_row_by_row():
    """Checks reuse each GPU's resident terms and refresh the rows charged or refunded since: after any sequence of
    changes a check equals one made with every GPU's terms computed afresh."""
    rng = np.random.default_rng(5)
    snapshot, load = _random_fleet(rng, n_nodes=12)
    placed = {}
    for step in range(60):
        stream = _random_stream(rng)
        check(snapshot, load, stream=stream)  # warms the cache before the change
        if placed and step % 3 == 0:
            name = str(rng.choice(sorted(placed)))
            load.refund(name)
            del placed[name]
        else:
            node, gpu = int(rng.integers(12)), int(rng.integers(4))
            load.charge(f"q{step}", node, (gpu,), stream)
            placed[f"q{step}"] = (node, gpu, stream)
        probe = _random_stream(rng)
        followed = check(snapshot, load, stream=probe).feasible
        latency_fit._RESIDENTS.pop(load)
        assert (followed == check(snapshot, load, stream=probe).feasible).all()


def test_a_check_explains_with_the_slots_it_was_made_on():
    """A refusal's figures are solved when first read: a pod charged after the check must not change them."""
    snapshot, load = cluster(1)
    fill(load, 0, 0, 14)
    result = check(snapshot, load)
    fill(load, 0, 0, 3, prefix="later")
    assert not result.feasible[0, 0]
    assert result.p95_ms[0, 0] == pytest.approx(32.0)
    with pytest.raises(ValueError, match="frozen"):
        load.frozen_copy().charge("x", 0, (0,), DET)
