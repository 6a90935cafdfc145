"""The public event schema of gpuplace: one pydantic model per topic (AsyncAPI source).

Subscribing teams can install and import this package alone; it imports nothing else from gpuplace.
Each model is the `v1` shape of its topic. Adding optional fields keeps v1; anything else is a v2 topic, published
alongside v1 during the switch (the rule in full: contracts/__init__.py). Models forbid unknown fields when
gpuplace builds an event (a typo fails at once); readers use read_event, which ignores them.
"""

from __future__ import annotations

import base64
import hashlib
from datetime import datetime
from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpuplace.contracts.envelope import INT32_MAX, INT32_MIN, QUANTITY_MAX, RESOURCE_MAX, Envelope

_K8S_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
# A countable resource (MIG profiles, other extended resources): what an int32 column and int64 sums hold.
Count = Annotated[int, Field(ge=0, le=INT32_MAX)]
# Any other resource kube-scheduler's NodeResourcesFit checks, in its base unit (bytes, or units).
Amount = Annotated[int, Field(ge=0, le=RESOURCE_MAX)]
# A NUMA node or NVLink domain number of one GPU.
TopologyId = Annotated[int, Field(ge=0, le=INT32_MAX)]
# Float fields say allow_inf_nan=False: JSON's 1e400 parses as inf, and no float field accepts it.


class GpuRequest(BaseModel):
    """What a pod asks of GPUs, already parsed from whichever vocabulary its manifest used.

    Per-GPU memory and per-GPU share are both first-class: robotics pods ask for memory, traces for shares.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_count: int = Field(ge=1, le=64)
    memory_mib_per_gpu: int | None = Field(default=None, ge=1, le=INT32_MAX)
    share_milli_per_gpu: int | None = Field(default=None, ge=1, le=1000)
    allowed_models: tuple[str, ...] = ()
    # More than one GPU: "preferred" places them in one NUMA node and NVLink domain when they fit there;
    # "required" waits for a node where they do (gpuplace.io/gpu-topology).
    topology: Literal["preferred", "required"] = "preferred"

    @model_validator(mode="after")
    def _one_unit_for_shared(self) -> GpuRequest:
        if self.gpu_count > 1 and self.share_milli_per_gpu not in (None, 1000):
            raise ValueError("a fractional share is only allowed for a single-GPU request")
        return self


class HamiRequest(BaseModel):
    """A pod's GPU request as HAMi's scheduler divides it (HAMi vocabulary only): what gpuplace writes into HAMi's
    `hami.io/vgpu-devices-to-allocate` at bind, so HAMi's device plugin (and HAMi-core in the container) finds it.

    `position` is the carrier container's place in HAMi's annotation (init containers first, then containers,
    HAMi pkg/device/devices.go Resourcereqs) of `containers` places. Memory is `memory_mib` MiB, or, without it,
    `memory_percent` of the chosen GPU's registered memory (pkg/device/nvidia/device.go Fit).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    position: int = Field(ge=0, le=INT32_MAX)
    containers: int = Field(ge=1, le=INT32_MAX)
    gpu_count: int = Field(ge=1, le=64)
    memory_mib: int | None = Field(default=None, ge=1, le=INT32_MAX)
    memory_percent: int | None = Field(default=None, ge=1, le=100)
    cores: int = Field(default=0, ge=0, le=100)

    @model_validator(mode="after")
    def _one_memory(self) -> HamiRequest:
        if self.position >= self.containers:
            raise ValueError(f"position {self.position} is beyond the pod's {self.containers} container(s)")
        if (self.memory_mib is None) == (self.memory_percent is None):
            raise ValueError("exactly one of memory_mib and memory_percent")
        return self


class Requirement(BaseModel):
    """One node selector requirement (core/v1 NodeSelectorRequirement): `key operator values`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str = Field(min_length=1, max_length=317)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: tuple[str, ...] = ()


class SelectorTerm(BaseModel):
    """A NodeSelectorTerm: every expression (labels) and every field requirement (metadata.name) must hold."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    match_expressions: tuple[Requirement, ...] = ()
    match_fields: tuple[Requirement, ...] = ()


class PreferredTerm(BaseModel):
    """A PreferredSchedulingTerm: `weight` (1-100) for nodes that match `term`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    weight: int = Field(ge=1, le=100)
    term: SelectorTerm


class Toleration(BaseModel):
    """A pod's toleration (core/v1 Toleration); an empty effect tolerates every effect."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""


class HostPort(BaseModel):
    """A container port the pod binds on the node (hostPort, protocol, hostIP)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    port: int = Field(ge=1, le=65535)
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"
    host_ip: str = ""


class DraDevice(BaseModel):
    """One GPU a ResourceClaim's allocation holds: its index (device `gpu-<index>`) and the memory it consumes
    there (consumedCapacity.memory in MiB, rounded up; None: the whole GPU)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int = Field(ge=0, le=63)
    memory_mib: int | None = Field(default=None, ge=0, le=INT32_MAX)


class DraClaim(BaseModel):
    """A ResourceClaim (resource.k8s.io/v1) a pod uses, as far as placement and the binder need it.

    For a pod gpuplace places: the claim to allocate (`request`, the name of its one device request; `memory`,
    the requested capacity exactly as written, copied into the allocation's consumedCapacity). For any pod whose
    claim is allocated already: the node and the GPUs it holds (`node`, `devices`), charged exactly there."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=_K8S_NAME, max_length=253)
    uid: str = Field(min_length=1)
    driver: str = ""
    request: str = ""
    memory: str | None = None
    node: str | None = None
    devices: tuple[DraDevice, ...] = ()


GpuEnforcement = Literal["dra", "declared", "hami", "mig", "none"]
"""What confines a pod to the GPU share gpuplace gives it on a node (NodeEvent.gpu_enforcement): `dra`, the node's
DRA driver prepares exactly what a claim allocated; `declared`, the node's `gpuplace.io/gpu-sharing-enforcement`
label says something there reads gpuplace's assignment and enforces it; `hami`, HAMi's device plugin and HAMi-core
(for HAMi's vocabulary); `mig`, MIG slices (for `nvidia.com/mig-*` requests); `none`, only a device plugin, which
hands out whole GPUs and limits no memory."""


class PodEvent(Envelope):
    """gpuplace.pods.v1: a pod that asks gpuplace to schedule it, its binding, or its end.

    Pods of other schedulers appear too, once bound to a node (`managed` False): gpuplace never places them,
    but they use the node's CPU, memory, pod slots, host ports and GPUs, so they are charged like its own.
    A pod that finished (phase Succeeded or Failed) is `deleted`: its resources are free again.
    """

    kind: Literal["pending", "bound", "deleted"]
    namespace: str = Field(pattern=_K8S_NAME, max_length=63)
    name: str = Field(pattern=_K8S_NAME, max_length=253)
    uid: str = Field(min_length=1)
    priority: int = Field(default=0, ge=INT32_MIN, le=INT32_MAX)  # int32 in kube (system pods: 2000001000)
    cpu_milli: int = Field(default=0, ge=0, le=QUANTITY_MAX)
    memory_mib: int = Field(default=0, ge=0, le=QUANTITY_MAX)
    gpu: GpuRequest | None = None
    request_error: str | None = None  # the manifest's GPU request could not be parsed: report, never guess
    deadline_ms: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    frame_rate_hz: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    workload: str | None = None
    # per-frame time alone on the reference GPU
    service_ms: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    node_name: str | None = None
    owner: str | None = None  # "<Kind>/<name>" of the controller, for per-owner eviction limits
    created_at: datetime | None = None
    managed: bool = True  # spec.schedulerName names gpuplace; False: another scheduler's pod, only charged
    nominated_node_name: str | None = None  # another scheduler's pod about to run there (preemption): charged there
    node_selector: dict[str, str] = Field(default_factory=dict)
    required_terms: tuple[SelectorTerm, ...] = ()  # requiredDuringScheduling node affinity (terms ORed)
    preferred_terms: tuple[PreferredTerm, ...] = ()  # preferredDuringScheduling node affinity
    tolerations: tuple[Toleration, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    extended: dict[str, Count] = Field(default_factory=dict)  # other countable resources, e.g. MIG profiles
    # Every other resource the pod requests that kube-scheduler's NodeResourcesFit checks (ephemeral-storage and
    # hugepages-* in bytes, extended resources such as example.com/fpga in units), as kube counts them
    # (sidecars, init containers, pod-level resources, overhead); not the GPU vocabularies' resources.
    resources: dict[str, Amount] = Field(default_factory=dict)
    # Fields of the spec that limit where kube-scheduler may put the pod and that gpuplace does not evaluate
    # (`spec.affinity.podAntiAffinity`, `spec.volumes[0].persistentVolumeClaim`, ...): the pod is refused, naming them
    unevaluated: tuple[Annotated[str, Field(max_length=253)], ...] = Field(default=(), max_length=16)
    hami: HamiRequest | None = None  # the request in HAMi's vocabulary, per HAMi container (bind annotations)
    # DRA: the ResourceClaims the pod uses (gpuplace's pods: exactly one, allocated by gpuplace before binding)
    dra_claims: tuple[DraClaim, ...] = ()
    # A GPU share (memory or a fraction of a GPU): the node enforcements that confine the pod to it; placed only
    # on such a node unless `unenforced_sharing`. Empty: the pod takes whole GPUs (or none), which the device plugin
    # or DRA driver hands out itself.
    gpu_enforcement: tuple[GpuEnforcement, ...] = ()
    # The cluster's operator allows sharing nothing enforces (GPUPLACE_ALLOW_UNENFORCED_SHARING): the pod may go to
    # a node outside `gpu_enforcement`, and then gets a warning Event saying nothing limits its GPU memory
    unenforced_sharing: bool = False

    def entity(self) -> str:
        return f"{self.namespace}/{self.name}"


class NodeEvent(Envelope):
    """gpuplace.nodes.v1: a node's GPU inventory, from its GPU Feature Discovery labels and allocatable."""

    kind: Literal["upsert", "deleted"]
    name: str = Field(pattern=_K8S_NAME, max_length=253)
    cpu_milli: int = Field(default=0, ge=0, le=QUANTITY_MAX)
    memory_mib: int = Field(default=0, ge=0, le=QUANTITY_MAX)
    gpu_model: str | None = None
    gpu_count: int = Field(default=0, ge=0, le=64)
    gpu_memory_mib: int = Field(default=0, ge=0, le=INT32_MAX)
    ready: bool = True
    unschedulable: bool = False
    labels: dict[str, str] = Field(default_factory=dict)
    taints: tuple[str, ...] = ()  # "key=value:Effect", as kubectl prints them
    max_pods: int | None = Field(default=None, ge=0, le=INT32_MAX)  # allocatable `pods`; None: not reported
    extended: dict[str, Count] = Field(default_factory=dict)  # other allocatable countables, e.g. MIG profiles
    # The rest of the node's allocatable that NodeResourcesFit checks (PodEvent.resources' units)
    resources: dict[str, Amount] = Field(default_factory=dict)
    # Per GPU index: its NUMA node and its NVLink domain (equal numbers: NVLink-connected); empty: not described.
    gpu_numa: tuple[TopologyId, ...] = ()
    gpu_nvlink: tuple[TopologyId, ...] = ()
    # "gpu.nvidia.com" when the GPUs above come from the node's ResourceSlice (DRA), not from labels
    dra_driver: str | None = None
    # What confines a pod to its GPU share there (GpuEnforcement); None: not reported (a cluster-watcher before it)
    gpu_enforcement: GpuEnforcement | None = None

    @model_validator(mode="after")
    def _one_per_gpu(self) -> NodeEvent:
        for name, values in (("gpu_numa", self.gpu_numa), ("gpu_nvlink", self.gpu_nvlink)):
            if values and len(values) != self.gpu_count:
                raise ValueError(f"{name} has {len(values)} value(s) for {self.gpu_count} GPU(s)")
        return self

    def entity(self) -> str:
        return self.name


class GpuTelemetry(Envelope):
    """gpuplace.telemetry.v1: one GPU's observed state (NVML or a DCGM exporter)."""

    kind: Literal["sample"] = "sample"
    node: str = Field(pattern=_K8S_NAME, max_length=253)
    gpu_index: int = Field(ge=0, le=63)
    gpu_uuid: str | None = None
    model: str | None = None
    memory_total_mib: int = Field(ge=0, le=INT32_MAX)
    memory_used_mib: int = Field(ge=0, le=INT32_MAX)
    utilization_pct: float = Field(default=0.0, ge=0, le=100, allow_inf_nan=False)
    healthy: bool = True

    @model_validator(mode="after")
    def _used_within_total(self) -> GpuTelemetry:
        if self.memory_used_mib > self.memory_total_mib:
            raise ValueError("memory_used_mib exceeds memory_total_mib")
        return self

    def entity(self) -> str:
        return f"{self.node}/{self.gpu_index}"


class LatencyWindow(Envelope):
    """gpuplace.latency.v1: per-pod frame latency summarised over a window."""

    kind: Literal["window"] = "window"
    namespace: str = Field(pattern=_K8S_NAME, max_length=63)
    pod: str = Field(pattern=_K8S_NAME, max_length=253)
    workload: str = Field(min_length=1)
    node: str | None = None
    gpu_index: int | None = Field(default=None, ge=0, le=INT32_MAX)
    window_s: float = Field(gt=0, allow_inf_nan=False)
    frames: int = Field(ge=1, le=INT32_MAX)
    p50_ms: float = Field(ge=0, allow_inf_nan=False)
    p95_ms: float = Field(ge=0, allow_inf_nan=False)
    p99_ms: float = Field(ge=0, allow_inf_nan=False)
    deadline_ms: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    deadline_misses: int = Field(default=0, ge=0, le=INT32_MAX)
    co_runners: list[str] = Field(default_factory=list, max_length=1024, description=(
        "namespace/name of the other pods on the same GPU while the window was taken, as gpu-agent saw them"))

    @model_validator(mode="after")
    def _ordered_percentiles(self) -> LatencyWindow:
        if not self.p50_ms <= self.p95_ms <= self.p99_ms:
            raise ValueError("percentiles must satisfy p50 <= p95 <= p99")
        if self.deadline_misses > self.frames:
            raise ValueError("deadline_misses exceeds frames")
        return self

    def entity(self) -> str:
        return f"{self.namespace}/{self.pod}"


class GpuAssignment(BaseModel):
    """One GPU given to a pod: its index on the node and what of it the pod holds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int = Field(ge=0, le=INT32_MAX)
    uuid: str | None = None
    memory_mib: int = Field(ge=0, le=INT32_MAX)
    share_milli: int = Field(ge=0, le=1000)


PlacementKind = Literal[
    "decided", "bound", "bind_failed", "unschedulable", "invalid_request", "slo_violation",
    "defrag_planned", "evicted", "defrag_completed", "defrag_aborted",
]


class Provenance(BaseModel):
    """What a decision was decided from, so that `gpuplace replay` can decide it again and say why not.

    All optional: a field added later is read past by older consumers (the schema evolution rule).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    policy_version: str | None = None  # the policy's code version (its VERSION, else the package's)
    config_digest: str | None = None  # SHA-256 prefix of the decision-relevant settings (policy, margins)
    latency_model: str | None = None  # digest of the latency model the latency filter used
    view_digest: str | None = None  # digest of the cluster state the decision saw (capacity, free GPU, slots)
    attempt: int | None = Field(default=None, ge=0)  # decisions this worker made in the cluster before this one
    last_pod_event: str | None = None  # event_id of the last pods.v1 event applied to the cluster before it
    last_node_event: str | None = None  # event_id of the last nodes.v1 event applied to the cluster before it


class PlacementEvent(Envelope):
    """gpuplace.placements.v1: what gpuplace decided or did about one pod, with its reasons."""

    kind: PlacementKind
    namespace: str
    pod: str
    pod_uid: str | None = None
    node: str | None = None
    gpus: tuple[GpuAssignment, ...] = ()
    policy: str | None = None
    reasons: dict[str, str] = Field(default_factory=dict)  # node class or step -> why
    decision_id: str | None = None
    provenance: Provenance | None = None  # on `decided` and `unschedulable`: what the decision saw

    def entity(self) -> str:
        return f"{self.namespace}/{self.pod}"


class NodeShape(BaseModel):
    """A node an autoscaler could add: its GPUs (model, count, memory each), CPU and host memory."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str  # e.g. "8xNVIDIA-H100-80GB-HBM3:96c:768Gi"
    gpu_model: str = ""
    gpu_count: int = Field(default=0, ge=0, le=64)
    gpu_memory_mib: int = Field(default=0, ge=0, le=INT32_MAX)
    cpu_milli: int = Field(ge=0, le=QUANTITY_MAX)
    memory_mib: int = Field(ge=0, le=QUANTITY_MAX)


class NodeAddition(BaseModel):
    """`nodes` new nodes of `shape` would place `pods` of the waiting pods, mostly blocked by `blocked_by`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    shape: NodeShape
    nodes: int = Field(ge=1, le=INT32_MAX)
    pods: int = Field(ge=0, le=INT32_MAX)
    blocked_by: Literal["capacity", "fragmentation", "latency"]


class DrainableNode(BaseModel):
    """A node whose pods could all move into holes elsewhere now (`moves` pods), leaving it empty."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    moves: int = Field(ge=0, le=INT32_MAX)


class ScaleHintEvent(Envelope):
    """gpuplace.hints.v1: why a cluster's pods wait and what would place them, for an autoscaler or an operator.

    Published when pods have waited and the hint changed (at most once per interval per cluster), not on every
    attempt. `blocked_by` counts the waiting pods by what blocks them: `capacity` (the free room on the nodes
    they could use falls short, or no node of a suitable model exists: add nodes), `fragmentation` (the room
    exists in total, in holes no single node or GPU offers: moving pods would do, or a new node), `latency`,
    `constraint` (no node shape could host them). `additions` are the node shapes, and how many of each, that
    would place the blocked pods (chosen for the fewest nodes; `reason` says what the other shapes would need);
    `drainable` the nodes that could be emptied by moving their pods into holes. An empty `additions` with
    nothing blocked means the pods no longer wait."""

    kind: Literal["scale_hint"] = "scale_hint"
    waiting: int = Field(ge=0, le=INT32_MAX)
    blocked_by: dict[str, Count] = Field(default_factory=dict)
    additions: tuple[NodeAddition, ...] = ()
    unplaceable: tuple[str, ...] = ()  # "namespace/name" of pods no node shape could host (at most 50)
    drainable: tuple[DrainableNode, ...] = ()
    reason: str = ""
    policy: str | None = None

    def entity(self) -> str:
        return "scale-hint"


class DeadLetter(Envelope):
    """gpuplace.deadletter.v1: a message a consumer could not accept, with why and its original bytes.

    The copy must fit Kafka's default 1 MB message even when the original was what did not: at most the first
    ORIGINAL_CAP bytes of the value (and KEY_CAP of the key) are kept, with the original's full length and
    SHA-256 (`original_size`, `original_sha256`) to find and compare it.
    """

    ORIGINAL_CAP: ClassVar[int] = 256 * 1024
    KEY_CAP: ClassVar[int] = 4 * 1024

    kind: Literal["rejected"] = "rejected"
    source_topic: str
    source_partition: int | None = None
    source_offset: int | None = None
    consumer: str
    reason: str
    original_key_b64: str | None = None
    original_value_b64: str  # the first ORIGINAL_CAP bytes of the value
    original_size: int | None = None  # the value's full length in bytes
    original_sha256: str | None = None  # hex digest of the full value

    @classmethod
    def of(cls, *, cluster: str, source_topic: str, consumer: str, reason: str, value: bytes,
           key: bytes | None = None, partition: int | None = None, offset: int | None = None) -> DeadLetter:
        return cls(
            cluster=cluster, source_topic=source_topic, consumer=consumer, reason=reason[:4000],
            source_partition=partition, source_offset=offset,
            original_key_b64=base64.b64encode(key[:cls.KEY_CAP]).decode() if key is not None else None,
            original_value_b64=base64.b64encode(value[:cls.ORIGINAL_CAP]).decode(),
            original_size=len(value), original_sha256=hashlib.sha256(value).hexdigest(),
        )

    def entity(self) -> str:
        return f"{self.source_topic}/{self.source_partition}/{self.source_offset}"


class EventTooLarge(ValueError):
    """An event whose JSON is over the producer's size cap (Kafka's default message limit is 1 MB)."""


def encode_within(event: Envelope, max_bytes: int) -> bytes:
    """The event's JSON, never over `max_bytes`. A pod event too large (a huge affinity, a long error) becomes
    a small event for the same pod that says so in `request_error`: the pod is reported, never guessed, and
    its resources are still charged. Any other event raises EventTooLarge."""
    body = event.model_dump_json(by_alias=True).encode()
    if len(body) <= max_bytes:
        return body
    if not isinstance(event, PodEvent):
        raise EventTooLarge(f"{type(event).__name__} {event.entity()} is {len(body)} bytes, over {max_bytes}")
    error = f"pod event of {len(body)} bytes exceeds the {max_bytes}-byte event limit; its rules were dropped"
    keep = {"event_id", "cluster", "region", "occurred_at", "schema_version", "kind", "namespace", "name", "uid",
            "priority", "cpu_milli", "memory_mib", "gpu", "node_name", "owner", "created_at", "managed", "resources"}
    small = PodEvent.model_validate({**event.model_dump(include=keep), "request_error": error})
    body = small.model_dump_json(by_alias=True).encode()
    if len(body) > max_bytes:  # a GPU request with thousands of allowed models, an owner name of megabytes
        body = small.model_copy(update={"gpu": None, "owner": None}).model_dump_json(by_alias=True).encode()
    if len(body) > max_bytes:
        raise EventTooLarge(f"pod {event.entity()}: even its stand-in is {len(body)} bytes, over {max_bytes}")
    return body


TOPIC_MODELS: dict[str, type[Envelope]] = {
    "gpuplace.pods.v1": PodEvent,
    "gpuplace.nodes.v1": NodeEvent,
    "gpuplace.telemetry.v1": GpuTelemetry,
    "gpuplace.latency.v1": LatencyWindow,
    "gpuplace.placements.v1": PlacementEvent,
    "gpuplace.deadletter.v1": DeadLetter,
    "gpuplace.hints.v1": ScaleHintEvent,
}

__all__ = [
    "GpuEnforcement", "GpuRequest", "HamiRequest", "DraDevice", "DraClaim", "Requirement", "SelectorTerm",
    "PreferredTerm", "Toleration", "HostPort", "PodEvent", "NodeEvent", "GpuTelemetry", "LatencyWindow",
    "GpuAssignment", "PlacementKind", "PlacementEvent", "Provenance", "DeadLetter", "NodeShape", "NodeAddition",
    "DrainableNode", "ScaleHintEvent", "TOPIC_MODELS", "EventTooLarge", "encode_within",
]
