"""Builders that read like the cluster they describe (kube's st.MakePod style).

    make_node("n1").cpu(64).gpus(2, "V100M16", memory_mib=16384).free(0, 300).build()
    make_pod("slam").cpu(6).gpu_share(460).build()
"""

from __future__ import annotations

from dataclasses import replace

from gpuplace.core.model import MILLI_PER_GPU, Gpu, GpuRequest, Node, Pod, Topology


class NodeBuilder:
    def __init__(self, name: str) -> None:
        self._node = Node(name, cpu_milli=64000, memory_mib=262144)
        self._free: dict[int, int] = {}

    def cpu(self, cores: float, free: float | None = None) -> NodeBuilder:
        self._node = replace(self._node, cpu_milli=int(cores * 1000),
                             cpu_free_milli=None if free is None else int(free * 1000))
        return self

    def memory_mib(self, mib: int, free: int | None = None) -> NodeBuilder:
        self._node = replace(self._node, memory_mib=mib, memory_free_mib=free)
        return self

    def gpus(self, count: int, model: str = "V100M16", memory_mib: int = 16384) -> NodeBuilder:
        self._node = replace(self._node, gpus=tuple(Gpu(i, model, memory_mib) for i in range(count)))
        return self

    def numa(self, *nodes: int) -> NodeBuilder:
        """NUMA node of GPUs 0, 1, ... (call after gpus())."""
        gpus = zip(self._node.gpus, nodes, strict=True)
        self._node = replace(self._node, gpus=tuple(replace(g, numa_node=n) for g, n in gpus))
        return self

    def nvlink(self, *domains: int) -> NodeBuilder:
        """NVLink domain of GPUs 0, 1, ... (call after gpus())."""
        gpus = zip(self._node.gpus, domains, strict=True)
        self._node = replace(self._node, gpus=tuple(replace(g, nvlink_domain=d) for g, d in gpus))
        return self

    def free(self, *shares_milli: int) -> NodeBuilder:
        """Free share of GPUs 0, 1, ... (the rest stay fully free); memory frees in proportion."""
        gpus = list(self._node.gpus)
        for i, share in enumerate(shares_milli):
            gpu = gpus[i]
            used = MILLI_PER_GPU - share
            gpus[i] = replace(gpu, free_share_milli=share,
                              free_memory_mib=gpu.memory_mib - used * gpu.memory_mib // MILLI_PER_GPU)
        self._node = replace(self._node, gpus=tuple(gpus))
        return self

    def build(self) -> Node:
        return self._node


class PodBuilder:
    def __init__(self, name: str) -> None:
        self._pod = Pod(name, cpu_milli=1000, memory_mib=1024)

    def cpu(self, cores: float) -> PodBuilder:
        self._pod = replace(self._pod, cpu_milli=int(cores * 1000))
        return self

    def memory_mib(self, mib: int) -> PodBuilder:
        self._pod = replace(self._pod, memory_mib=mib)
        return self

    def gpu_share(self, share_milli: int, count: int = 1, models: tuple[str, ...] = ()) -> PodBuilder:
        self._pod = replace(self._pod, gpu=GpuRequest(count, share_milli, None, models))
        return self

    def whole_gpus(self, count: int, models: tuple[str, ...] = ()) -> PodBuilder:
        return self.gpu_share(MILLI_PER_GPU, count, models)

    def gpu_memory_mib(self, mib: int, count: int = 1, models: tuple[str, ...] = ()) -> PodBuilder:
        self._pod = replace(self._pod, gpu=GpuRequest(count, None, mib, models))
        return self

    def topology(self, mode: Topology) -> PodBuilder:
        self._pod = replace(self._pod, gpu=replace(self._pod.gpu, topology=mode))
        return self

    def build(self) -> Pod:
        return self._pod


def make_node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def make_pod(name: str) -> PodBuilder:
    return PodBuilder(name)
