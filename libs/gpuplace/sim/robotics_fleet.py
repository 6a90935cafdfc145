"""A seeded generator of robotics perception fleets and pods (demo, benchmarks, scenario tests).

Shapes follow real perception stacks: a camera pipeline runs detection, segmentation, SLAM or depth at
10-30 fps; each pod asks for a slice of GPU memory sized to its model and batch, and must finish a frame
inside its deadline (33 ms at 30 fps, 66 ms at 15 fps, 100 ms at 10 fps). Service times are per frame on
an H100-class GPU; slower GPUs scale them (see GPU_SPEED).

Of a frame's service time only part holds the GPU (the rest is host-side pre/post-processing and
kernel launches): `gpu_work_fraction`, what co-runners wait behind (core/latency). Measured on an H200
for eager-PyTorch ResNets it is 0.22-0.28 (../shared/data/h200-colocation); the values below are
assumptions, not measurements, set higher because deployed perception engines (TensorRT, CUDA
graphs) launch less from the host and keep the GPU busier per frame.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuplace.core.model import GpuRequest, Node, Pod


@dataclass(frozen=True)
class GpuProduct:
    name: str  # as GPU Feature Discovery writes nvidia.com/gpu.product
    memory_mib: int
    speed: float  # frames per unit time relative to an H100 (higher is faster)


GPU_PRODUCTS = (
    GpuProduct("Tesla-V100-SXM2-16GB", 16_384, 0.35),
    GpuProduct("NVIDIA-A100-SXM4-40GB", 40_960, 0.65),
    GpuProduct("NVIDIA-H100-80GB-HBM3", 81_559, 1.0),
    GpuProduct("NVIDIA-H200", 143_771, 1.15),
)


@dataclass(frozen=True)
class PerceptionClass:
    workload: str
    memory_mib: tuple[int, int]  # uniform range of the slice asked for
    service_ms_h100: tuple[float, float]
    frame_rates_hz: tuple[float, ...]
    weight: float
    gpu_work_fraction: float = 1.0


PERCEPTION_CLASSES = (
    PerceptionClass("detection-yolo", (2_048, 6_144), (2.0, 5.0), (30.0, 15.0), 0.35, 0.5),
    PerceptionClass("segmentation", (4_096, 12_288), (6.0, 12.0), (15.0, 10.0), 0.2, 0.6),
    PerceptionClass("slam", (3_072, 9_420), (4.0, 9.0), (30.0, 15.0), 0.2, 0.4),
    PerceptionClass("depth-stereo", (2_048, 4_096), (3.0, 6.0), (30.0,), 0.15, 0.55),
    PerceptionClass("occupancy-bev", (10_240, 24_576), (10.0, 20.0), (10.0,), 0.1, 0.7),
)


def fleet(n_nodes: int, *, gpus_per_node: int = 8, seed: int = 0, prefix: str = "gpu-node") -> list[Node]:
    """`n_nodes` nodes with a mix of GPU products (more of the older, smaller ones, as fleets are)."""
    rng = np.random.default_rng(seed)
    mix = np.array([0.3, 0.35, 0.25, 0.1])
    products = rng.choice(len(GPU_PRODUCTS), size=n_nodes, p=mix)
    return [
        Node.with_gpus(f"{prefix}-{i:04d}", cpu_milli=96_000, memory_mib=768 * 1024, gpu_count=gpus_per_node,
                       gpu_model=GPU_PRODUCTS[p].name, gpu_memory_mib=GPU_PRODUCTS[p].memory_mib)
        for i, p in enumerate(products)
    ]


def pods(
    n_pods: int, *, seed: int = 0, prefix: str = "perception", memory_step_mib: int = 1
) -> list[tuple[Pod, float]]:
    """`n_pods` perception pods with their service time on an H100 (ms), in arrival order.

    Memory slices are rounded down to `memory_step_mib` (at least the class's minimum), as teams size
    them in whole or half GiB; the default 1 keeps every MiB. The draws do not depend on the step.
    """
    if memory_step_mib < 1:
        raise ValueError(f"memory_step_mib must be >= 1, got {memory_step_mib}")
    rng = np.random.default_rng(seed)
    weights = np.array([c.weight for c in PERCEPTION_CLASSES])
    picks = rng.choice(len(PERCEPTION_CLASSES), size=n_pods, p=weights / weights.sum())
    result = []
    for i, k in enumerate(picks):
        cls = PERCEPTION_CLASSES[k]
        fps = float(rng.choice(cls.frame_rates_hz))
        memory = int(rng.integers(cls.memory_mib[0], cls.memory_mib[1] + 1))
        memory = max(cls.memory_mib[0], memory // memory_step_mib * memory_step_mib)
        service_ms = float(rng.uniform(*cls.service_ms_h100))
        pod = Pod(
            name=f"{prefix}-{i:05d}", cpu_milli=int(rng.choice([500, 1000, 2000])),
            memory_mib=int(rng.choice([1024, 2048, 4096])),
            gpu=GpuRequest(count=1, memory_mib=memory), priority=int(rng.choice([0, 100, 1000], p=[0.6, 0.3, 0.1])),
            deadline_ms=round(1000.0 / fps, 1), frame_rate_hz=fps, workload_class=cls.workload,
        )
        result.append((pod, service_ms))
    return result


__all__ = ["GpuProduct", "GPU_PRODUCTS", "PerceptionClass", "PERCEPTION_CLASSES", "fleet", "pods"]
