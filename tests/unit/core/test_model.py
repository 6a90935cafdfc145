"""A GPU request in share or in memory, and the conversion between the two."""

import pytest

from gpuplace.core.model import GpuRequest, Node


def test_memory_request_converts_to_a_share_per_gpu_model():
    request = GpuRequest(count=1, memory_mib=9420)
    # 9420 MiB of a 16384 MiB GPU: 9420 * 1000 // 16384 = 574 milli (574.95.. floored)
    assert request.share_milli_on(16384) == 574
    # the same request on a 32768 MiB GPU: 9420 * 1000 // 32768 = 287 milli
    assert request.share_milli_on(32768) == 287
    # memory is what was asked, on any GPU
    assert request.memory_mib_on(32768) == 9420


def test_share_request_converts_to_memory_rounding_down():
    request = GpuRequest(count=1, share_milli=460)
    # 460 milli of 16384 MiB: 460 * 16384 // 1000 = 7536 MiB (7536.64 floored)
    assert request.memory_mib_on(16384) == 7536
    assert request.share_milli_on(16384) == 460


def test_floors_never_refuse_what_the_requested_unit_allows():
    # three 333m pods fit a GPU by share (999 <= 1000); by memory they take 3 * floor(333 * 16160 / 1000)
    # = 3 * 5381 = 16143 MiB <= 16160 MiB, so the derived view agrees.
    request = GpuRequest(count=1, share_milli=333)
    assert 3 * request.memory_mib_on(16160) <= 16160


def test_tiny_memory_request_still_takes_some_share():
    # 10 MiB of 16384 MiB floors to 0 milli; a GPU pod takes at least 1 milli
    assert GpuRequest(count=1, memory_mib=10).share_milli_on(16384) == 1


def test_memory_request_on_a_gpu_of_unknown_memory_cannot_be_converted():
    assert GpuRequest(count=1, memory_mib=4096).share_milli_on(0) is None


@pytest.mark.parametrize(
    "kwargs",
    [dict(count=-1), dict(count=1, share_milli=1001), dict(count=1, memory_mib=-5), dict(count=1)],
)
def test_invalid_requests_are_refused(kwargs):
    with pytest.raises(ValueError):
        GpuRequest(**kwargs)


def test_shared_means_one_gpu_and_less_than_all_of_it():
    assert GpuRequest(1, 500).is_shared
    assert not GpuRequest(1, 1000).is_shared
    assert not GpuRequest(2, 1000).is_shared
    assert not GpuRequest().needs_gpu


def test_node_with_identical_gpus():
    node = Node.with_gpus("n1", 64000, 262144, 4, "T4", 16384)
    assert [g.index for g in node.gpus] == [0, 1, 2, 3]
    assert node.gpu_model == "T4" and node.gpu_memory_mib == 16384
