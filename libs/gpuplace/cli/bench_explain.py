"""`gpuplace bench explain`: what a pod that fits nowhere costs to decide and explain, against a pod that fits.

    gpuplace bench explain --nodes 1200 --repeats 300

Issue 16 measured 249 ms to explain one unplaceable pod on 1,200 nodes, against 0.21 ms to decide a pod that
fits, paid again on every retry. This suite times exactly what the placement service calls per attempt: the
`Decider` of usecases/decide.py on a `ClusterView`, which decides and, when the pod fits nowhere, builds the
per-node-class reasons and kube-scheduler's FitError message (the `Unschedulable` placement records and reports).

The fleet is sim/robotics_fleet.py's (NODES x 8 GPUs of mixed models) with node objects' facts: a zone label per
node, a few cordoned nodes and a few tainted ones, so the NodeRules filter has work and reasons of its own. It
is filled at random to FILL_PCT of its GPU share with perception pods whose streams load the GPUs (the latency
filter's input). Then each case's pod is decided REPEATS times after WARMUP untimed calls, on the same view:

| case | the pod | what refuses it |
|---|---|---|
| gpu-fit | 8 whole GPUs | GpuFit on every node (no node has 8 idle GPUs left) |
| gpu-memory | two GPUs with 140 GiB each | GpuFit: unresolvable on the smaller GPUs, no hole that large on the others |
| selector | a zone no node has | NodeRules (node affinity), before any other filter |
| cpu | 200 cores | ResourcesFit (more than any node's capacity) |
| latency | 30 fps, 12 ms deadline | LatencyFit (through `latency_aware`): the co-runners leave no GPU fast enough |
| fits | a 2 GiB perception pod | nothing: the decision of a pod that fits, for comparison |

The report gives, per case, the median, p90 and max milliseconds per call, the median CPU milliseconds (the
process's own time: less disturbed by the other work on a shared machine), the medians of the core's decision
alone, wall and CPU, and their difference in CPU (what explaining costs), and the first reasons returned (so a
reader sees what was explained). One process, one thread; these shared machines are noisy, hence medians.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import typer

from gpuplace.cli import bench
from gpuplace.cli.console import new_console
from gpuplace.core.demand import resolve
from gpuplace.core.framework.interface import PolicyContext
from gpuplace.core.framework.runtime import decide
from gpuplace.core.gpu_load import GpuLoad
from gpuplace.core.latency.model import Stream
from gpuplace.core.model import GpuRequest, Pod
from gpuplace.core.node_rules import NO_SCHEDULE, NodeFacts, PodRules, Taint
from gpuplace.core.policies import registry
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.sim import robotics_fleet
from gpuplace.usecases.cluster_view import ClusterView, Placement
from gpuplace.usecases.decide import Decider
from gpuplace.usecases.feedback import Unschedulable

DEFAULT_OUT = Path("bench/results/explain.md")
GPUS_PER_NODE = 8
ZONES = ("zone-a", "zone-b", "zone-c")
CORDONED_EVERY = 50  # every 50th node is cordoned
TAINTED_EVERY = 40  # every 40th node (not cordoned) carries a NoSchedule taint


@dataclass(frozen=True)
class Case:
    name: str
    pod: Pod
    placeable: bool = False


def cases() -> tuple[Case, ...]:
    """The pods timed, see the module docstring's table."""
    return (
        Case("gpu-fit", Pod("explain-gpu-fit", 4000, 16_384, GpuRequest(count=8, share_milli=1000))),
        Case("gpu-memory", Pod("explain-gpu-memory", 1000, 4096, GpuRequest(count=2, memory_mib=140 * 1024))),
        Case("selector", Pod("explain-selector", 1000, 4096, GpuRequest(count=1, memory_mib=4096),
                             rules=PodRules(node_selector=(("topology.kubernetes.io/zone", "zone-x"),)))),
        Case("cpu", Pod("explain-cpu", 200_000, 4096, GpuRequest(count=1, memory_mib=4096))),
        Case("latency", Pod("explain-latency", 1000, 4096, GpuRequest(count=1, memory_mib=4096), deadline_ms=12.0,
                            frame_rate_hz=30.0, workload_class="segmentation")),
        Case("fits", Pod("explain-fits", 500, 1024, GpuRequest(count=1, memory_mib=2048)), placeable=True),
    )


def bench_explain(
    nodes: int = typer.Option(1200, min=1, help="nodes in the synthetic fleet (8 GPUs each, mixed models)"),
    policy: str = typer.Option("gpuplace", help="the placement policy the Decider serves"),
    fill_pct: float = typer.Option(70.0, min=0.0, max=95.0, help="GPU share filled at random before timing"),
    warmup: int = typer.Option(5, min=0, help="untimed calls per case before timing"),
    repeats: int = typer.Option(200, min=1, help="timed calls per case; the report gives medians"),
    seed: int = typer.Option(0, help="seed of the fleet and of the prefill"),
    out: Path = typer.Option(DEFAULT_OUT, help="markdown report (a .json with the raw timings beside it)"),
) -> None:
    """Milliseconds to decide and explain a pod that fits nowhere, beside deciding one that fits."""
    if policy not in registry.names():
        raise typer.BadParameter(f"unknown policy {policy!r}; known: {', '.join(registry.names())}")
    console = new_console(stderr=True)
    view = build_view(nodes, fill_pct, seed)
    decider = Decider(policy)
    rows = []
    for case in cases():
        row = time_case(view, decider, case, warmup, repeats)
        rows.append(row)
        console.print(f"{case.name}: median {row['median_ms']:.3f} ms, p90 {row['p90_ms']:.3f} ms "
                      f"({str(row['outcome'])[:100]})")
    report = _markdown(rows, nodes, policy, fill_pct, warmup, repeats, seed, view)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=2) + "\n")
    typer.echo(report)


def build_view(n_nodes: int, fill_pct: float, seed: int) -> ClusterView:
    """The fleet with facts and streams, prefilled at random (the same view for every case and policy)."""
    fleet = robotics_fleet.fleet(n_nodes, gpus_per_node=GPUS_PER_NODE, seed=seed)
    facts = [NodeFacts(node.name, {"nvidia.com/gpu.product": node.gpu_model,
                                   "topology.kubernetes.io/zone": ZONES[i % len(ZONES)]},
                       taints=(Taint("dedicated", "training", NO_SCHEDULE),) if i % TAINTED_EVERY == 1 else (),
                       unschedulable=i % CORDONED_EVERY == 0)
             for i, node in enumerate(fleet)]
    snapshot = ClusterSnapshot(fleet, facts)
    view = ClusterView("bench", snapshot, gpu_load=GpuLoad.for_snapshot(snapshot))
    random_fit = registry.create("random", PolicyContext(rng=np.random.default_rng(seed)))
    target = fill_pct / 100.0 * snapshot.total_gpu_milli
    for chunk in range(1_000_000):
        for pod, service_ms in robotics_fleet.pods(1000, seed=seed * 1000 + chunk, prefix=f"fill-{chunk}"):
            if snapshot.allocated_gpu_milli >= target:
                return view
            demand = resolve(pod, snapshot)
            decision = decide(snapshot, demand, random_fit)
            if decision.node is None:
                continue
            gpu_type = snapshot.gpu_type_id[decision.node]
            share, memory = int(demand.share_milli_by_type[gpu_type]), int(demand.gpu_memory_mib_by_type[gpu_type])
            view.charge(pod.name, Placement(decision.node_name or "", decision.gpu_indices, share, memory,
                                            pod.cpu_milli, pod.memory_mib, Stream.of(pod, service_ms), pod.rules))
    raise AssertionError("unreachable: the fleet never filled")


def time_case(view: ClusterView, decider: Decider, case: Case, warmup: int, repeats: int) -> dict[str, object]:
    """Time `repeats` Decider calls for the case's pod (wall and CPU), and as many of the core's decision alone
    (runtime.decide without explaining, same policy): the difference is what explaining costs. Refuses a case
    whose outcome is not the expected kind."""
    assert view.snapshot is not None
    stream = Stream.of(case.pod)
    outcome: object = None
    for _ in range(warmup):
        outcome = decider(view, case.pod, stream)
    wall, cpu, alone, alone_cpu = [], [], [], []
    demand = resolve(case.pod, view.snapshot)
    for _ in range(repeats):
        started, started_cpu = time.perf_counter(), time.process_time()
        outcome = decider(view, case.pod, stream)
        wall.append(1000.0 * (time.perf_counter() - started))
        cpu.append(1000.0 * (time.process_time() - started_cpu))
        started, started_cpu = time.perf_counter(), time.process_time()
        # the policy as the Decider builds it per call (latency: a new check of every GPU)
        decide(view.snapshot, demand, decider.policy(view, case.pod, stream, learn=False))
        alone.append(1000.0 * (time.perf_counter() - started))
        alone_cpu.append(1000.0 * (time.process_time() - started_cpu))
    waits = isinstance(outcome, Unschedulable)
    if waits == case.placeable:
        raise AssertionError(f"case {case.name}: expected {'a place' if case.placeable else 'no place'}, "
                             f"got {outcome!r}")
    wall.sort()
    text = (outcome.message + " | " + "; ".join(f"{k}: {v}" for k, v in outcome.items())
            if isinstance(outcome, Unschedulable) else f"placed on {getattr(outcome, 'node', '?')}")
    return {
        "case": case.name, "repeats": repeats, "median_ms": statistics.median(wall),
        "p90_ms": wall[int(0.9 * (len(wall) - 1))], "max_ms": wall[-1], "cpu_median_ms": statistics.median(cpu),
        "decide_alone_ms": statistics.median(alone), "decide_alone_cpu_ms": statistics.median(alone_cpu),
        "explain_cpu_ms": max(statistics.median(cpu) - statistics.median(alone_cpu), 0.0), "outcome": text,
    }


def _markdown(rows: list[dict[str, object]], nodes: int, policy: str, fill_pct: float, warmup: int,
              repeats: int, seed: int, view: ClusterView) -> str:
    assert view.snapshot is not None
    allocated = 100.0 * view.snapshot.allocated_gpu_milli / view.snapshot.total_gpu_milli
    lines = [
        f"# Deciding and explaining a pod that fits nowhere: {nodes} nodes x {GPUS_PER_NODE} GPUs",
        "",
        f"`gpuplace bench explain --nodes {nodes} --policy {policy} --fill-pct {fill_pct:g} --warmup {warmup} "
        f"--repeats {repeats} --seed {seed}` on {platform.node()} ({platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}): the placement service's Decider per call (decide, and for a pod "
        f"that waits its per-node-class reasons and kube-scheduler's message), median of {repeats} calls after "
        f"{warmup} untimed ones, on a fleet filled at random to {allocated:.1f}% of its GPU share.",
        "",
        "| case | median ms | p90 ms | max ms | CPU ms (median) | decide alone ms | decide alone CPU ms "
        "| explaining CPU ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    nan = float("nan")
    lines += [f"| {r['case']} | {r['median_ms']:.3f} | {r['p90_ms']:.3f} | {r['max_ms']:.3f} | "
              f"{r.get('cpu_median_ms', nan):.3f} | {r.get('decide_alone_ms', nan):.3f} | "
              f"{r.get('decide_alone_cpu_ms', nan):.3f} | {r.get('explain_cpu_ms', nan):.3f} |"
              for r in rows]
    lines += ["", "Decide alone: the core's `runtime.decide` for the same pod and policy without explaining, wall and "
              "CPU medians (for the latency case that includes the latency model's check of every GPU, which the "
              "Decider makes once per call and explaining reuses: most of the call). Explaining: the call's median "
              "CPU less the decision's, what building the reasons and kube's message costs."]
    lines += ["", "What each call returned (truncated):", ""]
    lines += [f"- {r['case']}: {str(r['outcome'])[:400]}" for r in rows]
    return "\n".join(lines) + "\n"


def register(app: typer.Typer) -> None:
    bench.bench_app.command("explain")(bench_explain)


__all__ = ["Case", "bench_explain", "build_view", "cases", "register", "time_case"]
