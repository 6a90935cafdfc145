"""The fleet and what will happen to it, drawn up front from the seed: regions, clusters, nodes, workloads.

Everything here is decided before the simulation starts and does not depend on any placement, so every
policy faces exactly the same fleet and the same demand:
- regions x clusters, each cluster `gpus_per_cluster` GPUs of sim/robotics_fleet.py's products (more of the
  older, smaller ones), on nodes of 8 or 4 GPUs; the regions' days are shifted (time zones);
- perception deployments (robotics_fleet's classes: a memory slice, a frame rate and a deadline of one frame
  period) whose replicas follow a daily sine, and their rollouts: a new version (model memory and service
  time change a little) that replaces every replica (engine.py does the rolling update);
- training jobs: one pod of 1, 2, 4 or 8 whole GPUs for a log-normal duration (4 GPUs and up: no V100); these
  shapes, not their frequencies, are what the fleet's operator declares (`expected_shapes`);
- CPU-only pods (controllers, data loaders) with exponential lifetimes;
- node additions (a product the cluster already has) and drains (never the first node of a product, so the
  cluster's GPU types stay the same and in the same order: the typical workload is resolved against them).
Sizes are set by offered load (`FleetScenario`): perception asks `perception_peak_memory` of the GPU memory
at its daily peak, training `training_gpus` of the GPUs on average, CPU pods `cpu_pods_cpu` of the CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from gpuplace.core.model import GpuRequest, Node, Pod
from gpuplace.sim.robotics_fleet import GPU_PRODUCTS, PERCEPTION_CLASSES

DAY_S = 86_400.0
HOUR_S = 3_600.0
PERCEPTION, TRAINING, CPU_ONLY = "perception", "training", "cpu"
CLASSES = (PERCEPTION, TRAINING, CPU_ONLY)
PERCEPTION_PRIORITY = 100
"""Perception serves robots: it goes before training in the queue, and may have training pods moved for it."""
REGIONS = ("us-east", "us-west", "eu-central", "ap-northeast", "ap-south")
TRAINING_GPUS = (1, 2, 4, 8)
"""The GPU counts training jobs ask (`_training` draws them 40/25/20/15%)."""
_BIG_MODELS = tuple(p.name for p in GPU_PRODUCTS if p.memory_mib >= 40_000)


@dataclass(frozen=True)
class FleetScenario:
    regions: int = 5
    clusters_per_region: int = 2
    gpus_per_cluster: int = 100
    days: float = 7.0
    product_mix: tuple[float, ...] = (0.25, 0.35, 0.28, 0.12)
    """Share of nodes per robotics_fleet.GPU_PRODUCTS entry (V100, A100, H100, H200)."""
    four_gpu_nodes: float = 0.2
    deployments_per_cluster: int = 12
    perception_peak_memory: float = 0.4
    daily_swing: float = 0.35
    """Replicas = base x (1 + swing x sin(phase of the local day)); the peak is base x (1 + swing)."""
    scale_interval_s: float = 1_800.0
    rollouts_per_day: float = 0.5
    """Per deployment."""
    training_gpus: float = 0.25
    training_median_h: float = 2.0
    training_sigma: float = 0.8
    cpu_pods_cpu: float = 0.08
    cpu_pod_mean_h: float = 6.0
    node_adds_per_day: float = 0.3
    node_drains_per_day: float = 0.3
    """Per cluster."""
    warmup_s: float = 3_600.0
    """The first hour fills the empty fleet: KPIs are integrated, and pending times sampled, after it."""

    def __post_init__(self) -> None:
        if not 1 <= self.regions <= len(REGIONS):
            raise ValueError(f"regions must be in 1..{len(REGIONS)}, got {self.regions}")
        if self.clusters_per_region < 1 or self.gpus_per_cluster < 8 or self.days <= 0:
            raise ValueError("need at least one cluster per region, 8 GPUs per cluster and a positive duration")
        if not 0 <= self.warmup_s < self.duration_s:
            raise ValueError(f"the run ({self.days:g} days) must be longer than its warm-up ({self.warmup_s:g} s)")
        if len(self.product_mix) != len(GPU_PRODUCTS) or not math.isclose(sum(self.product_mix), 1.0):
            raise ValueError(f"product_mix needs {len(GPU_PRODUCTS)} shares summing to 1")

    @property
    def duration_s(self) -> float:
        return self.days * DAY_S


@dataclass(frozen=True)
class Template:
    """One version of a perception deployment's pod: what every replica of that version asks."""

    version: int
    workload_class: str
    memory_mib: int
    cpu_milli: int
    host_memory_mib: int
    frame_rate_hz: float
    service_ms: float


@dataclass(frozen=True)
class Deployment:
    name: str
    cluster: str
    base_replicas: int
    phase: float
    """Fraction of a day by which the region's day is shifted."""
    templates: tuple[Template, ...]
    """Version 0, then one per rollout, in rollout order."""
    rollouts_s: tuple[float, ...]
    """When version i+1 starts rolling out."""


@dataclass(frozen=True)
class Job:
    """A pod that arrives at `at_s` and, once running, leaves after `duration_s` (training or CPU-only)."""

    pod: Pod
    kind: str
    cluster: str
    at_s: float
    duration_s: float


@dataclass(frozen=True)
class NodeEvent:
    at_s: float
    cluster: str
    node: Node
    add: bool
    """True: the node joins; False: it is drained (its pods evicted and queued again) and leaves."""


@dataclass(frozen=True)
class ClusterPlan:
    name: str
    region: str
    nodes: tuple[Node, ...]
    """The initial nodes, in the cluster's node order (seeded)."""


@dataclass(frozen=True)
class FleetPlan:
    scenario: FleetScenario
    seed: int
    clusters: tuple[ClusterPlan, ...]
    deployments: tuple[Deployment, ...]
    jobs: tuple[Job, ...]
    node_events: tuple[NodeEvent, ...]
    typical_pods: dict[str, list[Pod]] = field(default_factory=dict)
    """Per cluster, pods in the proportions the plan submits them (`_typical`): the typical workload FGD is given
    and against which stranded memory is measured."""
    expected_shapes: tuple[GpuRequest, ...] = ()
    """The training jobs' GPU requests, as the fleet's operator declares them to a placement service
    (GPUPLACE_EXPECTED_SHAPES): which GPU counts come and on which models, not how often. Policies that learn the
    mix online are given them (PolicyContext.expected_shapes), as FGD is given `typical_pods`."""


def replicas(deployment: Deployment, at_s: float, swing: float) -> int:
    """Desired replicas at `at_s` (the daily sine of the module docstring), at least 1."""
    angle = 2.0 * math.pi * (at_s / DAY_S + deployment.phase)
    return max(1, round(deployment.base_replicas * (1.0 + swing * math.sin(angle))))


def perception_pod(deployment: Deployment, template: Template, serial: int) -> Pod:
    return Pod(
        name=f"{deployment.name}-v{template.version}-{serial:05d}", cpu_milli=template.cpu_milli,
        memory_mib=template.host_memory_mib, gpu=GpuRequest(count=1, memory_mib=template.memory_mib),
        priority=PERCEPTION_PRIORITY, deadline_ms=round(1000.0 / template.frame_rate_hz, 1),
        frame_rate_hz=template.frame_rate_hz, workload_class=template.workload_class,
    )


def make_plan(scenario: FleetScenario, seed: int) -> FleetPlan:
    """Draw the fleet and its demand (see the module docstring); the same seed gives the same plan."""
    rng = np.random.default_rng([seed, 18])
    clusters: list[ClusterPlan] = []
    deployments: list[Deployment] = []
    jobs: list[Job] = []
    events: list[NodeEvent] = []
    typical: dict[str, list[Pod]] = {}
    for r in range(scenario.regions):
        region = REGIONS[r]
        phase = r / scenario.regions
        for c in range(scenario.clusters_per_region):
            name = f"{region}-{c + 1}"
            nodes = _nodes(scenario, name, rng)
            clusters.append(ClusterPlan(name, region, tuple(nodes)))
            deps = _deployments(scenario, name, nodes, phase, rng)
            deployments.extend(deps)
            cluster_jobs = _training(scenario, name, nodes, rng) + _cpu_pods(scenario, name, nodes, rng)
            jobs.extend(cluster_jobs)
            events.extend(_node_events(scenario, name, nodes, rng))
            typical[name] = _typical(deps, cluster_jobs, scenario)
    jobs.sort(key=lambda j: (j.at_s, j.pod.name))
    events.sort(key=lambda e: (e.at_s, e.cluster, e.node.name))
    return FleetPlan(scenario, seed, tuple(clusters), tuple(deployments), tuple(jobs), tuple(events), typical,
                     tuple(training_request(k) for k in TRAINING_GPUS))


def _node(name: str, product: int, gpus: int) -> Node:
    p = GPU_PRODUCTS[product]
    cpu, memory = (96_000, 768 * 1024) if gpus == 8 else (48_000, 384 * 1024)
    return Node.with_gpus(name, cpu_milli=cpu, memory_mib=memory, gpu_count=gpus, gpu_model=p.name,
                          gpu_memory_mib=p.memory_mib)


def _nodes(scenario: FleetScenario, cluster: str, rng: np.random.Generator) -> list[Node]:
    nodes: list[Node] = []
    total = 0
    mix = np.asarray(scenario.product_mix)
    while total < scenario.gpus_per_cluster:
        product = int(rng.choice(len(GPU_PRODUCTS), p=mix))
        gpus = 4 if rng.random() < scenario.four_gpu_nodes else 8
        nodes.append(_node(f"{cluster}-n{len(nodes):03d}", product, gpus))
        total += gpus
    present = {n.gpu_model for n in nodes}
    if len(present) < 2:  # a cluster of one product is not the mixed fleet this scenario is about
        nodes.append(_node(f"{cluster}-n{len(nodes):03d}", 2 if GPU_PRODUCTS[2].name not in present else 1, 8))
    order = rng.permutation(len(nodes))
    return [nodes[i] for i in order]


def _deployments(scenario: FleetScenario, cluster: str, nodes: list[Node], phase: float,
                 rng: np.random.Generator) -> list[Deployment]:
    memory_capacity = sum(n.gpu_memory_mib * len(n.gpus) for n in nodes)
    largest = max(n.gpu_memory_mib for n in nodes)
    weights = np.array([k.weight for k in PERCEPTION_CLASSES])
    picks = rng.choice(len(PERCEPTION_CLASSES), size=scenario.deployments_per_cluster, p=weights / weights.sum())
    shares = rng.dirichlet(np.full(scenario.deployments_per_cluster, 2.0))
    budget = scenario.perception_peak_memory * memory_capacity / (1.0 + scenario.daily_swing)
    out = []
    for d, k in enumerate(picks):
        cls = PERCEPTION_CLASSES[int(k)]
        first = Template(0, cls.workload, _round_mib(float(rng.integers(cls.memory_mib[0], cls.memory_mib[1] + 1))),
                         int(rng.choice([500, 1000, 2000])), int(rng.choice([2048, 4096, 8192])),
                         float(rng.choice(cls.frame_rates_hz)), float(rng.uniform(*cls.service_ms_h100)))
        rollouts = _poisson_times(scenario.rollouts_per_day / DAY_S, scenario.duration_s, rng)
        templates = [first]
        for i in range(len(rollouts)):
            prev = templates[-1]
            memory = min(largest, _round_mib(prev.memory_mib * rng.uniform(0.85, 1.2)))
            templates.append(Template(i + 1, prev.workload_class, memory, prev.cpu_milli, prev.host_memory_mib,
                                      prev.frame_rate_hz, prev.service_ms * float(rng.uniform(0.9, 1.1))))
        base = max(1, round(shares[d] * budget / first.memory_mib))
        out.append(Deployment(f"{cluster}-{cls.workload}-{d:02d}", cluster, base, phase, tuple(templates),
                              tuple(rollouts)))
    return out


def _training(scenario: FleetScenario, cluster: str, nodes: list[Node], rng: np.random.Generator) -> list[Job]:
    counts = np.array(TRAINING_GPUS)
    probs = np.array([0.4, 0.25, 0.2, 0.15])
    mean_h = scenario.training_median_h * math.exp(scenario.training_sigma ** 2 / 2)
    gpus = sum(len(n.gpus) for n in nodes)
    rate = scenario.training_gpus * gpus / (float(counts @ probs) * mean_h * HOUR_S)
    jobs = []
    for i, at in enumerate(_poisson_times(rate, scenario.duration_s, rng)):
        k = int(rng.choice(counts, p=probs))
        hours = float(rng.lognormal(math.log(scenario.training_median_h), scenario.training_sigma))
        pod = Pod(f"{cluster}-train-{i:05d}", cpu_milli=6_000 * k, memory_mib=32_768 * k,
                  gpu=training_request(k), workload_class=TRAINING)
        jobs.append(Job(pod, TRAINING, cluster, at, hours * HOUR_S))
    return jobs


def training_request(gpus: int) -> GpuRequest:
    """A training job's GPUs: whole ones, and from 4 up only on models of 40 GB or more."""
    return GpuRequest(count=gpus, share_milli=1000, allowed_models=_BIG_MODELS if gpus >= 4 else ())


def _cpu_pods(scenario: FleetScenario, cluster: str, nodes: list[Node], rng: np.random.Generator) -> list[Job]:
    cpu = sum(n.cpu_milli for n in nodes)
    sizes = np.array([2_000, 4_000, 8_000])
    rate = scenario.cpu_pods_cpu * cpu / (float(sizes.mean()) * scenario.cpu_pod_mean_h * HOUR_S)
    jobs = []
    for i, at in enumerate(_poisson_times(rate, scenario.duration_s, rng)):
        size = int(rng.choice(sizes))
        pod = Pod(f"{cluster}-cpu-{i:05d}", cpu_milli=size, memory_mib=size * 4, workload_class=CPU_ONLY)
        jobs.append(Job(pod, CPU_ONLY, cluster, at, float(rng.exponential(scenario.cpu_pod_mean_h * HOUR_S))))
    return jobs


def _node_events(scenario: FleetScenario, cluster: str, nodes: list[Node],
                 rng: np.random.Generator) -> list[NodeEvent]:
    events = []
    first_of_type: dict[str, str] = {}
    for node in nodes:
        first_of_type.setdefault(node.gpu_model, node.name)
    drainable = [n for n in nodes if first_of_type[n.gpu_model] != n.name]
    for i, at in enumerate(_poisson_times(scenario.node_adds_per_day / DAY_S, scenario.duration_s, rng)):
        like = nodes[int(rng.integers(len(nodes)))]
        product = next(j for j, p in enumerate(GPU_PRODUCTS) if p.name == like.gpu_model)
        events.append(NodeEvent(at, cluster, _node(f"{cluster}-added{i:02d}", product, len(like.gpus)), True))
    for at in _poisson_times(scenario.node_drains_per_day / DAY_S, scenario.duration_s, rng):
        if not drainable:
            break
        node = drainable.pop(int(rng.integers(len(drainable))))
        events.append(NodeEvent(at, cluster, node, False))
    return events


def _typical(deployments: list[Deployment], jobs: list[Job], scenario: FleetScenario) -> list[Pod]:
    """Pods in the proportions the plan submits them (the paper's M is the arriving tasks): every training and
    CPU-only job once, and per perception version its expected submissions -- base replicas when it starts
    (at t=0 or at its rollout) plus the daily scale-ups while it is current (2 x swing x base a day)."""
    pods: list[Pod] = []
    for d in deployments:
        starts = (0.0, *d.rollouts_s)
        ends = (*d.rollouts_s, scenario.duration_s)
        for template, start, end in zip(d.templates, starts, ends, strict=True):
            n = round(d.base_replicas * (1.0 + 2.0 * scenario.daily_swing * (end - start) / DAY_S))
            pods.extend(perception_pod(d, template, i) for i in range(n))
    pods.extend(j.pod for j in jobs)
    return pods


def _round_mib(mib: float, step: int = 256) -> int:
    return max(step, int(mib) // step * step)


def _poisson_times(rate_per_s: float, until_s: float, rng: np.random.Generator) -> list[float]:
    if rate_per_s <= 0:
        return []
    n = int(rng.poisson(rate_per_s * until_s))
    return sorted(float(t) for t in rng.uniform(0.0, until_s, size=n))


__all__ = [
    "CLASSES", "CPU_ONLY", "ClusterPlan", "DAY_S", "Deployment", "FleetPlan", "FleetScenario", "HOUR_S", "Job",
    "NodeEvent", "PERCEPTION", "PERCEPTION_PRIORITY", "REGIONS", "TRAINING", "TRAINING_GPUS", "Template",
    "make_plan", "perception_pod", "replicas", "training_request",
]
