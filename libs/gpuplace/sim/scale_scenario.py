"""A fragmented robotics fleet and a wave of pods that waits on it: what the autoscalers are compared on.

Seeded and deterministic. A fleet of sim/robotics_fleet's mix (V100 to H200, 8 GPUs a node) is filled with
perception pods and training jobs placed by the policy until the requested GPU memory reaches `fill_pct` of the
fleet's; `depart_pct` of them then leave, chosen at random, as rollouts and finished jobs do, leaving holes; the
fleet is refilled to `refill_pct` by newer pods (which land in holes and make new ones). Then a wave of pods
(`wave_pct` of the fleet's GPU memory: a perception rollout scaling up, with training jobs) arrives and is placed
in order; the pods of the wave that fit nowhere are the waiting pods. `running` lists every pod left on the
fleet, for drain hints.

Training jobs ask for 1, 2, 4 or 8 whole GPUs of an A100, H100 or H200 with 8 CPU and 64 GiB a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuplace.core.defrag.model import RunningPod
from gpuplace.core.demand import resolve
from gpuplace.core.framework.interface import Policy, PolicyContext
from gpuplace.core.framework.runtime import bind, decide
from gpuplace.core.model import GpuRequest, Pod
from gpuplace.core.policies import registry
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.sim import robotics_fleet

TRAINING_MODELS = tuple(p.name for p in robotics_fleet.GPU_PRODUCTS if p.memory_mib >= 40_000)
TRAINING_GPUS = (1, 2, 4, 8)
TRAINING_GPU_P = (0.4, 0.3, 0.2, 0.1)


@dataclass(frozen=True, eq=False)
class Scenario:
    seed: int
    snapshot: ClusterSnapshot
    waiting: tuple[Pod, ...]
    running: tuple[RunningPod, ...]
    wave: int  # pods in the wave, placed or not

    def summary(self) -> dict[str, object]:
        s = self.snapshot
        free_gib = float(s.free_memory_mib[s.gpu_exists].sum()) / 1024
        whole_free = int((s.gpu_exists & (s.free_share_milli == 1000)).sum())
        return {"seed": self.seed, "nodes": s.n_nodes, "gpus": s.total_gpus, "running": len(self.running),
                "wave": self.wave, "waiting": len(self.waiting),
                "waiting_gpu_pods": sum(p.gpu.needs_gpu for p in self.waiting),
                "waiting_training": sum(p.workload_class == "training" for p in self.waiting),
                "free_gpu_memory_gib": round(free_gib, 1), "whole_gpus_free": whole_free}


def fragmented_wave(seed: int, *, n_nodes: int = 40, fill_pct: float = 92.0, depart_pct: float = 35.0,
                    refill_pct: float = 85.0, wave_pct: float = 40.0, training_fraction: float = 0.08,
                    policy: str = "gpuplace") -> Scenario:
    """The scenario of the module docstring at `seed`."""
    rng = np.random.default_rng(seed)
    snapshot = ClusterSnapshot(robotics_fleet.fleet(n_nodes, seed=seed))
    placer = registry.create(policy, PolicyContext(rng=np.random.default_rng(seed)))
    capacity = float(snapshot.gpu_memory_mib @ snapshot.gpu_count)
    running: dict[str, RunningPod] = {}
    stream = _Stream(rng, seed, training_fraction)
    _fill(snapshot, placer, stream, running, capacity * fill_pct / 100)
    for uid in sorted(rng.choice(sorted(running), size=int(len(running) * depart_pct / 100), replace=False)):
        _leave(snapshot, running.pop(str(uid)))
    _fill(snapshot, placer, stream, running, capacity * refill_pct / 100)
    wave = stream.take(capacity * wave_pct / 100, "wave")
    waiting = [pod for pod in wave if not _place(snapshot, placer, pod, running)]
    return Scenario(seed, snapshot, tuple(waiting), tuple(running.values()), len(wave))


class _Stream:
    """Pods in arrival order: perception pods (robotics_fleet.pods) with training jobs mixed in."""

    def __init__(self, rng: np.random.Generator, seed: int, training_fraction: float = 0.08) -> None:
        self._rng = rng
        self._seed = seed
        self._batch = 0
        self._training = training_fraction

    def take(self, gpu_memory_mib: float, prefix: str) -> list[Pod]:
        """Pods asking for about `gpu_memory_mib` of GPU memory in all (a training GPU counts 80 GiB)."""
        self._batch += 1
        batch = robotics_fleet.pods(int(gpu_memory_mib // 2048) + 16, seed=self._seed * 1000 + self._batch,
                                    prefix=f"{prefix}{self._batch}", memory_step_mib=512)
        perception = iter(p for p, _ in batch)
        pods: list[Pod] = []
        total = 0.0
        while total < gpu_memory_mib:
            if self._rng.random() < self._training:
                count = int(self._rng.choice(TRAINING_GPUS, p=TRAINING_GPU_P))
                pod = Pod(f"{prefix}{self._batch}-train-{len(pods):05d}", cpu_milli=8000 * count,
                          memory_mib=65_536 * count,
                          gpu=GpuRequest(count=count, share_milli=1000, allowed_models=TRAINING_MODELS),
                          workload_class="training")
                total += 81_920 * count
            else:
                pod = next(perception)
                total += pod.gpu.memory_mib or 0
            pods.append(pod)
        return pods


def _fill(snapshot: ClusterSnapshot, placer: Policy, stream: _Stream, running: dict[str, RunningPod],
          target_mib: float) -> None:
    """Place pods from `stream` until the GPU memory held reaches `target_mib` (pods that do not fit are dropped)."""
    while (held := _held(snapshot)) < target_mib:
        for pod in stream.take(max(target_mib - held, 65_536.0), "bg"):
            _place(snapshot, placer, pod, running)
        if _held(snapshot) <= held:  # nothing more fits
            return


def _held(snapshot: ClusterSnapshot) -> float:
    return float((snapshot.gpu_memory_mib[:, None] - snapshot.free_memory_mib)[snapshot.gpu_exists].sum())


def _place(snapshot: ClusterSnapshot, placer: Policy, pod: Pod, running: dict[str, RunningPod]) -> bool:
    demand = resolve(pod, snapshot)
    decision = decide(snapshot, demand, placer)
    if not decision.scheduled:
        return False
    a = bind(snapshot, demand, decision)
    running[pod.name] = RunningPod(pod.name, pod, a.node_name, a.gpu_indices, a.share_milli[0] if a.share_milli
                                   else 0, a.memory_mib[0] if a.memory_mib else 0)
    return True


def _leave(snapshot: ClusterSnapshot, pod: RunningPod) -> None:
    row = snapshot.index_of(pod.node_name)
    demand = resolve(pod.pod, snapshot)
    snapshot.refund(row, pod.gpu_indices, pod.pod.cpu_milli, pod.pod.memory_mib, pod.share_milli, pod.memory_mib,
                    demand.kind_on(snapshot, row), pod.pod.rules)


__all__ = ["Scenario", "TRAINING_GPUS", "TRAINING_GPU_P", "TRAINING_MODELS", "fragmented_wave"]
