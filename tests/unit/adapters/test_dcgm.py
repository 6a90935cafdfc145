"""A DCGM exporter's metrics text -> per-GPU samples."""

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
