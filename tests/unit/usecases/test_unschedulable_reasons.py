"""What a waiting pod is told, word for word: the per-node-class reasons placement records and kube-scheduler's
message its Event carries, for representative pods that fit nowhere (issue 16 changed how they are computed, and
one reason's words, below).

The expected texts were produced by the per-node implementation that issue 16 replaced (tests/unit/core/
statuses_oracle.py keeps it), on these very scenes, and pasted here; then one change, marked "CHANGED" where it
applies (cpu-memory, gpu-fit, gpu-memory):

- GpuFit's reason for a node whose GPUs are only too full now, "k of n GPU(s) with >= s m and >= m MiB free
  (largest hole ...)", carried that node's own numbers, so on a busy fleet every node had its own reason: kube's
  message held one entry per node (1,123 for an 8-GPU pod on 1,200 nodes) and building it missed issue 16's 5 ms.
  kube-scheduler's NodeResourcesFit says "Insufficient nvidia.com/gpu" on every node and keeps the numbers apart
  (pkg/scheduler/framework/plugins/noderesources/fit.go). Now kube's message says "fewer than n GPU(s) with
  >= s m and >= m MiB free" ("no GPU with ..." for one; the same on every node of a GPU model); the per-class
  reasons keep the numbers: as before where the class's nodes with that reason have the same numbers, else
  "fewer than ... (at most k such GPU(s) on a node, largest hole ...)" over those nodes, one line instead of one
  per node. A node's own status (Decision.statuses) still reads as before (tests/unit/core/test_verdicts.py).
"""

from __future__ import annotations

import pytest

from gpuplace.core.gpu_load import GpuLoad
from gpuplace.core.latency.model import ClassProfile, LatencyModel, Stream, Tail
from gpuplace.core.model import Gpu, GpuRequest, Node, Pod
from gpuplace.core.node_rules import HostPort, NodeFacts, PodRules, Taint, Toleration
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.usecases.cluster_view import ClusterView, Placement
from gpuplace.usecases.decide import Decider
from gpuplace.usecases.feedback import Unschedulable

A100, V100, H100 = ("NVIDIA-A100-SXM4-40GB", 40960), ("Tesla-V100-SXM2-16GB", 16384), ("NVIDIA-H100-80GB-HBM3", 81559)
MIG = "nvidia.com/mig-1g.10gb"
ZONE = "topology.kubernetes.io/zone"
TOLERATE_ALL = (Toleration(operator="Exists"),)
MODEL = LatencyModel(Tail(1.0, 2.0, 0.5), Tail(1.2, 2.0, 1.0), Tail(1.3, 2.5, 1.0),
                     classes={"det": ClassProfile(4.0, 0.5)})


def _node(name: str, gpus: int, gpu: tuple[str, int], free_share: tuple[int, ...] = (), cpu_free: int | None = None,
          memory_free: int | None = None) -> Node:
    model, mib = gpu
    shares = free_share + (1000,) * (gpus - len(free_share))
    return Node(name, 64_000, 262_144, tuple(Gpu(i, model, mib, s, mib * s // 1000) for i, s in enumerate(shares)),
                cpu_free_milli=cpu_free, memory_free_mib=memory_free)


def rules_scene() -> ClusterView:
    """Eight nodes: cordoned, tainted, not ready, a CPU-only one, MIG slices on the A100s, used GPUs and CPU."""
    nodes = [
        _node("a1", 2, A100, (300,), cpu_free=8_000),
        _node("a2", 2, A100, (1000, 450), memory_free=4_096),
        _node("a3", 2, A100),
        _node("v1", 4, V100, (400, 400, 1000, 0)),
        _node("v2", 4, V100, (1000, 900, 900, 900)),
        _node("v3", 4, V100, (100, 200, 300, 250), cpu_free=2_000),
        _node("h1", 8, H100, (500,) * 8),
        Node("c1", 32_000, 131_072),
    ]
    facts = [
        NodeFacts("a1", {ZONE: "zone-a"}, extended={MIG: 2}),
        NodeFacts("a2", {ZONE: "zone-a"}, extended={MIG: 4}),
        NodeFacts("a3", {ZONE: "zone-a"}, unschedulable=True, extended={MIG: 2}),
        NodeFacts("v1", {ZONE: "zone-b"}),
        NodeFacts("v2", {ZONE: "zone-b"}, taints=(Taint("dedicated", "training"),)),
        NodeFacts("v3", {ZONE: "zone-b"}),
        NodeFacts("h1", {ZONE: "zone-a"}, ready=False),
        NodeFacts("c1", {ZONE: "zone-c"}),
    ]
    snapshot = ClusterSnapshot(nodes, facts)
    snapshot.pods_free[snapshot.index_of("v1")] = 0
    snapshot.host_ports_used[snapshot.index_of("a2")].append(HostPort(8080))
    return ClusterView("east", snapshot)


def latency_scene(streams: tuple[tuple[int, int], ...] = ((14, 14), (16, 16), (30, 30))) -> ClusterView:
    """Three H100 nodes whose two GPUs carry `streams` detection streams each (30 fps, 33 ms deadlines)."""
    snapshot = ClusterSnapshot([Node.with_gpus(name, 64_000, 262_144, 2, *H100) for name in ("h1", "h2", "h3")])
    view = ClusterView("east", snapshot, gpu_load=GpuLoad.for_snapshot(snapshot), latency_model=MODEL)
    for node, per_gpu in zip(("h1", "h2", "h3"), streams, strict=True):
        for gpu, count in enumerate(per_gpu):
            for i in range(count):
                view.charge(f"{node}-{gpu}-{i}", Placement(node, (gpu,), 10, 256, 100, 64,
                                                           Stream(30.0, "det", deadline_ms=1000 / 30)))
    return view


def _unschedulable(view: ClusterView, pod: Pod, policy: str = "bestfit") -> Unschedulable:
    outcome = Decider(policy)(view, pod, Stream.of(pod))
    assert isinstance(outcome, Unschedulable), outcome
    return outcome


CASES = {
    "selector": (rules_scene, Pod("sel", 1000, 1024, GpuRequest(1, 500), rules=PodRules(
        node_selector=((ZONE, "zone-x"),))), "bestfit"),
    "cpu-memory": (rules_scene, Pod("big", 40_000, 200_000, GpuRequest(5, 1000), rules=PodRules(
        tolerations=TOLERATE_ALL)), "bestfit"),
    "cpu-capacity": (rules_scene, Pod("huge", 100_000, 1024, rules=PodRules(tolerations=TOLERATE_ALL)), "bestfit"),
    "gpu-fit": (rules_scene, Pod("three", 1000, 1024, GpuRequest(3, 1000), rules=PodRules(
        tolerations=TOLERATE_ALL)), "bestfit"),
    "gpu-memory": (rules_scene, Pod("mem", 1000, 1024, GpuRequest(1, memory_mib=60_000), rules=PodRules(
        tolerations=TOLERATE_ALL)), "bestfit"),
    "gpu-model": (rules_scene, Pod("h200", 1000, 1024, GpuRequest(1, 500, allowed_models=("NVIDIA-H200",))),
                  "bestfit"),
    "ports-slots-mig": (rules_scene, Pod("mig", 1000, 1024, GpuRequest(1, 950), rules=PodRules(
        tolerations=TOLERATE_ALL, host_ports=(HostPort(8080),), extended=((MIG, 3),))), "bestfit"),
    "exclusive": (rules_scene, Pod("excl", 1000, 1024, GpuRequest(2, 100), rules=PodRules(
        tolerations=TOLERATE_ALL, node_selector=((ZONE, "zone-b"),))), "exclusive"),
    "latency": (latency_scene, Pod("det", 1000, 1024, GpuRequest(1, memory_mib=2048), deadline_ms=1000 / 30,
                                   frame_rate_hz=30.0, workload_class="det"), "bestfit"),
    "latency-alone": (latency_scene, Pod("slow", 1000, 1024, GpuRequest(1, memory_mib=2048), deadline_ms=3.0,
                                         frame_rate_hz=30.0, workload_class="det"), "fgd"),
    # one GPU of h1 keeps the deadlines, the pod needs two: the latency filter passes h1, the base on the latency
    # view does not, and the node is "rejected by policy"
    "latency-policy": (lambda: latency_scene(((10, 30), (16, 16), (30, 30))),
                       Pod("pair", 1000, 1024, GpuRequest(2, memory_mib=2048), deadline_ms=1000 / 30,
                           frame_rate_hz=30.0, workload_class="det"), "bestfit"),
}

EXPECTED: dict[str, tuple[dict[str, str], str]] = {  # case: (reasons by node class, kube's message)
    "cpu-capacity": (
        {"NVIDIA-A100-SXM4-40GB": "2 node(s): insufficient CPU: 100000m requested, 64000m free (ResourcesFit), 1 "
                                  "node(s): insufficient CPU: 100000m requested, 8000m free (ResourcesFit)",
         "NVIDIA-H100-80GB-HBM3": "1 node(s): insufficient CPU: 100000m requested, 64000m free (ResourcesFit)",
         "Tesla-V100-SXM2-16GB": "1 node(s): Too many pods (NodeRules), 1 node(s): insufficient CPU: 100000m "
                                 "requested, 64000m free (ResourcesFit), 1 node(s): insufficient CPU: 100000m "
                                 "requested, 2000m free (ResourcesFit)",
         "cpu-only": "1 node(s): insufficient CPU: 100000m requested, 32000m free (ResourcesFit)"},
        ("0/8 nodes are available: 1 Too many pods, 1 insufficient CPU: 100000m requested, 2000m free, 1 "
         "insufficient CPU: 100000m requested, 32000m free, 1 insufficient CPU: 100000m requested, 8000m free, 4 "
         "insufficient CPU: 100000m requested, 64000m free."),
    ),
    "cpu-memory": (
        {"NVIDIA-A100-SXM4-40GB": "1 node(s): insufficient CPU: 40000m requested, 8000m free (ResourcesFit), 1 "
                                  "node(s): insufficient memory: 200000 MiB requested, 4096 MiB free (ResourcesFit), "
                                  "1 node(s): node has 2 GPU(s) of 40960 MiB; the pod needs 5 x (1000m, 40960 MiB) "
                                  "(GpuFit)",
         "NVIDIA-H100-80GB-HBM3": "1 node(s): 0 of 5 GPU(s) with >= 1000m and >= 81559 MiB free (largest hole 500m, "
                                  "40779 MiB) (GpuFit)",
         "Tesla-V100-SXM2-16GB": "1 node(s): Too many pods (NodeRules), 1 node(s): node has 4 GPU(s) of 16384 MiB; "
                                 "the pod needs 5 x (1000m, 16384 MiB) (GpuFit), 1 node(s): insufficient CPU: 40000m "
                                 "requested, 2000m free (ResourcesFit)",
         "cpu-only": "1 node(s): insufficient CPU: 40000m requested, 32000m free; insufficient memory: 200000 MiB "
                     "requested, 131072 MiB free (ResourcesFit)"},
        # CHANGED: was "... available: 1 0 of 5 GPU(s) with >= 1000m and >= 81559 MiB free (largest hole 500m, 40779
        # MiB), 1 Too many pods, ..." (kube's message: no per-node numbers; the class reason above keeps them)
        ("0/8 nodes are available: 1 Too many pods, 1 fewer than 5 GPU(s) with >= 1000m and >= 81559 MiB free, 1 "
         "insufficient CPU: 40000m requested, 2000m free, 1 insufficient CPU: 40000m "
         "requested, 32000m free, 1 insufficient CPU: 40000m requested, 8000m free, 1 insufficient memory: 200000 "
         "MiB requested, 131072 MiB free, 1 insufficient memory: 200000 MiB requested, 4096 MiB free, 1 node has 2 "
         "GPU(s) of 40960 MiB; the pod needs 5 x (1000m, 40960 MiB), 1 node has 4 GPU(s) of 16384 MiB; the pod needs "
         "5 x (1000m, 16384 MiB)."),
    ),
    "exclusive": (
        {"NVIDIA-A100-SXM4-40GB": "3 node(s): node(s) didn't match Pod's node affinity/selector (NodeRules)",
         "NVIDIA-H100-80GB-HBM3": "1 node(s): node(s) didn't match Pod's node affinity/selector (NodeRules)",
         "Tesla-V100-SXM2-16GB": "1 node(s): Too many pods (NodeRules), 1 node(s): 1 idle GPU(s), the pod needs 2 "
                                 "(exclusive: one pod per GPU) (exclusive), 1 node(s): 0 idle GPU(s), the pod needs "
                                 "2 (exclusive: one pod per GPU) (exclusive)",
         "cpu-only": "1 node(s): node(s) didn't match Pod's node affinity/selector (NodeRules)"},
        ("0/8 nodes are available: 1 0 idle GPU(s), the pod needs 2 (exclusive: one pod per GPU), 1 1 idle GPU(s), "
         "the pod needs 2 (exclusive: one pod per GPU), 1 Too many pods, 5 node(s) didn't match Pod's node "
         "affinity/selector."),
    ),
    "gpu-fit": (
        {"NVIDIA-A100-SXM4-40GB": "3 node(s): node has 2 GPU(s) of 40960 MiB; the pod needs 3 x (1000m, 40960 MiB) "
                                  "(GpuFit)",
         "NVIDIA-H100-80GB-HBM3": "1 node(s): 0 of 3 GPU(s) with >= 1000m and >= 81559 MiB free (largest hole 500m, "
                                  "40779 MiB) (GpuFit)",
         # CHANGED: the two V100 nodes with different numbers were two lines, "1 node(s): 1 of 3 GPU(s) with >= 1000m
         # and >= 16384 MiB free (largest hole 1000m, 16384 MiB) (GpuFit), 1 node(s): 0 of 3 GPU(s) with >= 1000m and
         # >= 16384 MiB free (largest hole 300m, 4915 MiB) (GpuFit)", after "1 node(s): Too many pods (NodeRules)"
         "Tesla-V100-SXM2-16GB": "2 node(s): fewer than 3 GPU(s) with >= 1000m and >= 16384 MiB free (at most 1 such "
                                 "GPU(s) on a node, largest hole 1000m, 16384 MiB) (GpuFit), 1 node(s): Too many "
                                 "pods (NodeRules)",
         "cpu-only": "1 node(s): GPU model none not allowed for the pod (GpuModel)"},
        # CHANGED: was "... available: 1 0 of 3 GPU(s) with >= 1000m and >= 16384 MiB free (largest hole 300m, 4915
        # MiB), 1 0 of 3 GPU(s) with >= 1000m and >= 81559 MiB free (largest hole 500m, 40779 MiB), 1 1 of 3 GPU(s)
        # with >= 1000m and >= 16384 MiB free (largest hole 1000m, 16384 MiB), 1 GPU model none ..."
        ("0/8 nodes are available: 1 GPU model none not allowed for the pod, 1 Too many pods, 1 fewer than 3 GPU(s) "
         "with >= 1000m and >= 81559 MiB free, 2 fewer than 3 GPU(s) with >= 1000m and >= 16384 MiB free, 3 node has "
         "2 GPU(s) of 40960 MiB; the pod needs 3 x (1000m, 40960 MiB)."),
    ),
    "gpu-memory": (
        {"NVIDIA-A100-SXM4-40GB": "3 node(s): node has 2 GPU(s) of 40960 MiB; the pod needs 1 x (1000m, 60000 MiB) "
                                  "(GpuFit)",
         "NVIDIA-H100-80GB-HBM3": "1 node(s): 0 of 1 GPU(s) with >= 735m and >= 60000 MiB free (largest hole 500m, "
                                  "40779 MiB) (GpuFit)",
         "Tesla-V100-SXM2-16GB": "2 node(s): node has 4 GPU(s) of 16384 MiB; the pod needs 1 x (1000m, 60000 MiB) "
                                 "(GpuFit), 1 node(s): Too many pods (NodeRules)",
         "cpu-only": "1 node(s): GPU model none not allowed for the pod (GpuModel)"},
        # CHANGED: was "... available: 1 0 of 1 GPU(s) with >= 735m and >= 60000 MiB free (largest hole 500m, 40779
        # MiB), 1 GPU model none ..."
        ("0/8 nodes are available: 1 GPU model none not allowed for the pod, 1 Too many pods, 1 no GPU with >= 735m "
         "and >= 60000 MiB free, 2 node has 4 GPU(s) of 16384 MiB; the pod needs 1 x (1000m, 60000 MiB), 3 node has 2 "
         "GPU(s) of 40960 MiB; the pod needs 1 x (1000m, 60000 MiB)."),
    ),
    "gpu-model": (
        {"NVIDIA-A100-SXM4-40GB": "2 node(s): GPU model NVIDIA-A100-SXM4-40GB not allowed for the pod (GpuModel), 1 "
                                  "node(s): node(s) were unschedulable (NodeRules)",
         "NVIDIA-H100-80GB-HBM3": "1 node(s): node(s) had untolerated taint(s) (NodeRules)",
         "Tesla-V100-SXM2-16GB": "1 node(s): Too many pods (NodeRules), 1 node(s): node(s) had untolerated taint(s) "
                                 "(NodeRules), 1 node(s): GPU model Tesla-V100-SXM2-16GB not allowed for the pod "
                                 "(GpuModel)",
         "cpu-only": "1 node(s): GPU model none not allowed for the pod (GpuModel)"},
        ("0/8 nodes are available: 1 GPU model Tesla-V100-SXM2-16GB not allowed for the pod, 1 GPU model none not "
         "allowed for the pod, 1 Too many pods, 1 node(s) were unschedulable, 2 GPU model NVIDIA-A100-SXM4-40GB not "
         "allowed for the pod, 2 node(s) had untolerated taint(s)."),
    ),
    "latency": (
        {"NVIDIA-H100-80GB-HBM3": "1 node(s): no GPU keeps every pod within its deadline: best is GPU 0, predicted "
                                  "p95 32.0 ms > 30.0 ms (deadline less 10%), load 0.90 with the pod (LatencyFit), 1 "
                                  "node(s): every GPU would be overloaded (GPU 0: load 1.02 with the pod) "
                                  "(LatencyFit), 1 node(s): every GPU would be overloaded (GPU 0: load 1.86 with the "
                                  "pod) (LatencyFit)"},
        ("0/3 nodes are available: 1 every GPU would be overloaded (GPU 0: load 1.02 with the pod), 1 every GPU "
         "would be overloaded (GPU 0: load 1.86 with the pod), 1 no GPU keeps every pod within its deadline: best is "
         "GPU 0, predicted p95 32.0 ms > 30.0 ms (deadline less 10%), load 0.90 with the pod."),
    ),
    "latency-alone": (
        {"NVIDIA-H100-80GB-HBM3": "3 node(s): the pod alone on this node's GPU model predicts p95 above 90% of its "
                                  "deadline (LatencyFit)"},
        "0/3 nodes are available: 3 the pod alone on this node's GPU model predicts p95 above 90% of its deadline.",
    ),
    "latency-policy": (
        {"NVIDIA-H100-80GB-HBM3": "1 node(s): rejected by policy bestfit+latency (bestfit+latency), 1 node(s): every "
                                  "GPU would be overloaded (GPU 0: load 1.02 with the pod) (LatencyFit), 1 node(s): "
                                  "every GPU would be overloaded (GPU 0: load 1.86 with the pod) (LatencyFit)"},
        ("0/3 nodes are available: 1 every GPU would be overloaded (GPU 0: load 1.02 with the pod), 1 every GPU "
         "would be overloaded (GPU 0: load 1.86 with the pod), 1 rejected by policy bestfit+latency."),
    ),
    "ports-slots-mig": (
        {"NVIDIA-A100-SXM4-40GB": "2 node(s): Insufficient nvidia.com/mig-1g.10gb (NodeRules), 1 node(s): node(s) "
                                  "didn't have free ports for the requested pod ports (NodeRules)",
         "NVIDIA-H100-80GB-HBM3": "1 node(s): Insufficient nvidia.com/mig-1g.10gb (NodeRules)",
         "Tesla-V100-SXM2-16GB": "3 node(s): Insufficient nvidia.com/mig-1g.10gb (NodeRules)",
         "cpu-only": "1 node(s): Insufficient nvidia.com/mig-1g.10gb (NodeRules)"},
        ("0/8 nodes are available: 1 node(s) didn't have free ports for the requested pod ports, 7 Insufficient "
         "nvidia.com/mig-1g.10gb."),
    ),
    "selector": (
        {"NVIDIA-A100-SXM4-40GB": "2 node(s): node(s) didn't match Pod's node affinity/selector (NodeRules), 1 "
                                  "node(s): node(s) were unschedulable (NodeRules)",
         "NVIDIA-H100-80GB-HBM3": "1 node(s): node(s) had untolerated taint(s) (NodeRules)",
         "Tesla-V100-SXM2-16GB": "2 node(s): node(s) didn't match Pod's node affinity/selector (NodeRules), 1 "
                                 "node(s): node(s) had untolerated taint(s) (NodeRules)",
         "cpu-only": "1 node(s): node(s) didn't match Pod's node affinity/selector (NodeRules)"},
        ("0/8 nodes are available: 1 node(s) were unschedulable, 2 node(s) had untolerated taint(s), 5 node(s) "
         "didn't match Pod's node affinity/selector."),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_reasons_and_message_are_what_they_were(case: str) -> None:
    scene, pod, policy = CASES[case]
    outcome = _unschedulable(scene(), pod, policy)
    assert (dict(outcome), outcome.message) == EXPECTED[case]
