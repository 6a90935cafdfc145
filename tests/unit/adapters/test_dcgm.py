"""A DCGM exporter's metrics text -> per-GPU samples."""

import pytest

from gpuplace.adapters.gpu.dcgm import parse_metrics

EXPORTER_TEXT = """\
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-aaa",device="nvidia0",modelName="NVIDIA H200",Hostname="node-a"} 15557
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-bbb",device="nvidia1",modelName="NVIDIA H200",Hostname="node-a"} 0
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-ccc",device="nvidia0",modelName="NVIDIA H200",Hostname="node-b"} 99
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-aaa",device="nvidia0",modelName="NVIDIA H200",Hostname="node-a"} 128214
DCGM_FI_DEV_FB_FREE{gpu="1",UUID="GPU-bbb",device="nvidia1",modelName="NVIDIA H200",Hostname="node-a"} 143771
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-aaa",device="nvidia0",modelName="NVIDIA H200",Hostname="node-a"} 94
DCGM_FI_DEV_XID_ERRORS{gpu="1",UUID="GPU-bbb",device="nvidia1",modelName="NVIDIA H200",Hostname="node-a"} 79
"""


def test_samples_for_this_node_only():
    samples = parse_metrics(EXPORTER_TEXT, hostname="node-a")
    # GPU 0: 15557 used + 128214 free = 143771 MiB; GPU 1 reported XID 79 (fell off the bus): unhealthy
    assert [(s.index, s.memory_used_mib, s.memory_total_mib, s.utilization_pct, s.healthy) for s in samples] == [
        (0, 15557, 143771, 94.0, True), (1, 0, 143771, 0.0, False)]
    assert samples[0].uuid == "GPU-aaa" and samples[0].model == "NVIDIA H200"


def test_the_exposition_format_is_read_by_prometheus_clients_parser():
    # a timestamp after the value, spaces between labels, an escaped quote and a comma inside a label value (the
    # hand-written regex this replaced kept the backslashes); a NaN value is skipped
    text = (
        'DCGM_FI_DEV_FB_USED{Hostname="node-a", modelName="NVIDIA H200 \\"SXM\\", 141GB",gpu="2"} 1000 1700000000000\n'
        'DCGM_FI_DEV_FB_FREE{gpu="2",Hostname="node-a"} 9000\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="2",Hostname="node-a"} NaN\n'
    )
    [sample] = parse_metrics(text, hostname="node-a")
    assert (sample.index, sample.memory_total_mib, sample.utilization_pct) == (2, 10000, 0.0)
    assert sample.model == 'NVIDIA H200 "SXM", 141GB'


def test_text_that_is_not_the_exposition_format_is_an_error():
    # the regex skipped such lines silently; gpu-agent logs the failed scrape and keeps going
    with pytest.raises(ValueError):
        parse_metrics('DCGM_FI_DEV_FB_USED{gpu="0" 12\n')
