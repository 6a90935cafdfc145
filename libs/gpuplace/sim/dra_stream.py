"""The seeded stream of GPU claims `gpuplace bench dra` submits: robotics perception memory slices and whole-GPU
training jobs of 1, 2, 4 and 8 GPUs, in arrival order.

Perception pods are `robotics_fleet.pods` (their memory slices, rounded down to half a GiB as teams size them; their
deadlines and frame rates ride along for gpuplace's latency model); training jobs ask for whole GPUs, as
`sim/robustness.py`'s families do, in the shares `TRAINING` gives. Which arrival is which is drawn first, from the
seed alone, so the same seed gives the same stream for both schedulers the bench compares.

Every pod has priority 0: with priorities kube-scheduler preempts lower-priority pods to seat a waiting one, and the
bench would then count pods that were placed and deleted again.

At `training_scale` 1, 2,000 claims over-ask 200 nodes x 8 GPUs of `robotics_fleet.fleet` 1.23x (about 0.82 whole
GPUs per claim from training alone, plus the slices); at 0.7, the default of `gpuplace bench dra`, they ask about
91% of it: the fleet could hold them all, and a claim that fails fails for how the GPUs were shared out. `over_ask`
says by how much a stream over-asks a fleet.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from gpuplace.core.model import MILLI_PER_GPU, GpuRequest, Node, Pod
from gpuplace.sim import robotics_fleet

TRAINING = ((1, 0.16), (2, 0.09), (4, 0.06), (8, 0.03))
"""(whole GPUs, share of all claims): 34% of claims are training jobs, 0.82 whole GPUs per claim on average."""
SLICE_STEP_MIB = 512
TRAINING_CPU_PER_GPU = 4_000
TRAINING_MEMORY_PER_GPU_MIB = 16 * 1024
STREAM_SEED_SALT = 0xD7A  # the kind draw's stream, apart from robotics_fleet.pods' draws for the same seed


@dataclass(frozen=True)
class OverAsk:
    """What a stream asks of a fleet, in whole GPUs: training GPUs plus the slices' memory in GPUs of the fleet's
    mean size; `ratio` above 1 means the fleet cannot hold it all."""

    whole_gpus: int
    slice_memory_mib: int
    fleet_gpus: int
    fleet_memory_mib: int

    @property
    def gpu_equivalents(self) -> float:
        mean = self.fleet_memory_mib / self.fleet_gpus if self.fleet_gpus else 0.0
        return self.whole_gpus + (self.slice_memory_mib / mean if mean else 0.0)

    @property
    def ratio(self) -> float:
        return self.gpu_equivalents / self.fleet_gpus if self.fleet_gpus else float("inf")


def is_whole(pod: Pod) -> bool:
    """A claim for whole devices (no memory slice): it consumes each device's full memory."""
    return pod.gpu.memory_mib is None


def claims(n: int, *, seed: int = 0, prefix: str = "claim", training_scale: float = 1.0) -> list[Pod]:
    """`n` pods in arrival order, each asking one claim's worth of GPU: a memory slice of one GPU
    (`gpu.memory_mib`) or `gpu.count` whole GPUs (`gpu.share_milli` 1000, no memory). `training_scale` multiplies
    TRAINING's shares (the slices take the rest): 0.7 makes 2,000 claims ask about 90% of what 200 nodes hold,
    so a claim that fails fails for fragmentation rather than for want of GPUs."""
    if n < 0:
        raise ValueError(f"a stream of {n} claims")
    training = [s * training_scale for _, s in TRAINING]
    if not 0 <= sum(training) <= 1:
        raise ValueError(f"training_scale {training_scale} gives training jobs {sum(training):.0%} of the claims")
    rng = np.random.default_rng([seed, STREAM_SEED_SALT])
    counts = np.array([0] + [k for k, _ in TRAINING])
    shares = np.array([1.0 - sum(training), *training])
    kinds = counts[rng.choice(len(counts), size=n, p=shares)]
    perception = iter(robotics_fleet.pods(int((kinds == 0).sum()), seed=seed, memory_step_mib=SLICE_STEP_MIB))
    stream = []
    for i, gpus in enumerate(kinds):
        name = f"{prefix}-{i:05d}"
        if gpus == 0:
            pod, _service_ms = next(perception)
            stream.append(replace(pod, name=name, priority=0))
            continue
        stream.append(Pod(name=name, cpu_milli=int(gpus) * TRAINING_CPU_PER_GPU,
                          memory_mib=int(gpus) * TRAINING_MEMORY_PER_GPU_MIB,
                          gpu=GpuRequest(count=int(gpus), share_milli=MILLI_PER_GPU), priority=0,
                          workload_class=f"training-{int(gpus)}gpu"))
    return stream


def over_ask(stream: Sequence[Pod], fleet: Sequence[Node]) -> OverAsk:
    return OverAsk(whole_gpus=sum(p.gpu.count for p in stream if is_whole(p)),
                   slice_memory_mib=sum(p.gpu.count * (p.gpu.memory_mib or 0) for p in stream if not is_whole(p)),
                   fleet_gpus=sum(len(n.gpus) for n in fleet),
                   fleet_memory_mib=sum(g.memory_mib for n in fleet for g in n.gpus))


__all__ = ["OverAsk", "SLICE_STEP_MIB", "STREAM_SEED_SALT", "TRAINING", "TRAINING_CPU_PER_GPU",
           "TRAINING_MEMORY_PER_GPU_MIB", "claims", "is_whole", "over_ask"]
