"""Seeded random pod specs and node twins over kube-scheduler's whole predicate space, for the parity runs.

Each spec comes with a random node, created twice (twins: the same labels, taints, cordon, allocatable and port
holder; only the name and hostname differ). gpuplace's copy of the pod is pinned to one twin by a
`kubernetes.io/hostname` selector, kube-scheduler's to the other, so each verdict is about the rules alone and
kube-scheduler is the oracle for gpuplace's node: the twins are identical in everything a rule may read. A spec
may name its node through `matchFields` (metadata.name): NODE_NAME stands for whichever twin its copy is pinned to.

What is drawn, with odd values where kube reads them strictly:
- nodes: labels (a numeric `rank`, values such as "007" and "1_0"), NoSchedule/NoExecute/PreferNoSchedule
  taints, cordon, CPU, memory, pod slots, ephemeral-storage, hugepages-2Mi, an extended resource
  (example.com/fpga), whole GPUs, a host port already taken;
- pods: nodeSelector; required terms, among them empty ones (`{}`, `{matchExpressions: []}`), every operator,
  Gt/Lt operands past int64 or with "_" or a sign, values that are no label value, matchFields on the name;
  preferred terms (some unparseable: kube-scheduler's PreScore then errors); tolerations; host ports;
  containers, plain init containers and sidecars (`restartPolicy: Always`) asking CPU, memory,
  ephemeral-storage, hugepages, FPGAs and whole GPUs; pod-level requests; and, rarely, fields gpuplace refuses to
  place by (pod anti-affinity, topology spread, a PVC, GPUs asked by an init container).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

NODE_NAME = "$NODE"
HOSTNAME = "kubernetes.io/hostname"
FPGA = "example.com/fpga"
LABELS = {"zone": ["a", "b", "c"], "disk": ["ssd", "hdd"], "rank": ["1", "3", "5", "007", "1_0", "12"],
          "team": ["x", "y"]}
TAINTS = [("dedicated", "infra"), ("gpu", "true"), ("maintenance", "")]
EFFECTS = ["NoSchedule", "NoExecute", "PreferNoSchedule"]
OPERANDS = ["0", "4", "6", "10", "1_0", "+4", "-1", "99999999999999999999", "9223372036854775807"]
IMAGE = "registry.local/app:1"


@dataclass(frozen=True)
class Case:
    """One spec and the node its twins are made of."""

    node: dict[str, Any]
    spec: dict[str, Any]


def cases(seed: int, count: int) -> list[Case]:
    """`count` cases, the same for the same seed."""
    rng = random.Random(seed)
    drawn = []
    for _ in range(count):
        node = random_node(rng)
        drawn.append(Case(node, random_pod_spec(rng, node["labels"])))
    return drawn


def random_node(rng: random.Random) -> dict[str, Any]:
    labels = {k: rng.choice(v) for k, v in LABELS.items() if rng.random() < 0.7}
    taints = [{"key": k, "value": v, "effect": rng.choice(EFFECTS)} for k, v in TAINTS if rng.random() < 0.07]
    resources = {name: rng.choice(amounts) for name, amounts, chance in (
        ("ephemeral-storage", ["10Gi", "100Gi"], 0.6), ("hugepages-2Mi", ["0", "64Mi", "1Gi"], 0.3),
        (FPGA, ["1", "2"], 0.3)) if rng.random() < chance}
    return {"labels": labels, "taints": taints, "unschedulable": rng.random() < 0.05,
            "cpu": rng.choice(["2", "4", "8", "16"]), "memory": rng.choice(["4Gi", "8Gi", "16Gi", "32Gi"]),
            "pods": rng.choice([110, 110, 110, 1]), "gpus": rng.choice([0, 0, 1, 2]), "resources": resources,
            "port_taken": rng.random() < 0.1}


def _requirement(rng: random.Random, labels: dict[str, str]) -> dict[str, Any]:
    """A requirement on a random key, its values drawn so that about half match `labels` (the node's)."""
    key = rng.choice(list(LABELS))
    operator = rng.choice(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"])
    if operator in ("Exists", "DoesNotExist"):
        return {"key": key, "operator": operator}
    if operator in ("Gt", "Lt"):
        return {"key": "rank", "operator": operator, "values": [rng.choice(OPERANDS)]}
    values = rng.sample(LABELS[key], rng.randint(1, min(3, len(LABELS[key]))))
    if key in labels and rng.random() < 0.5:
        values = sorted({*values, labels[key]}) if operator == "In" else [v for v in values if v != labels[key]] \
            or ["none"]
    if rng.random() < 0.08:
        values.append("not a label value")  # the apiserver takes it; labels.NewRequirement does not
    return {"key": key, "operator": operator, "values": values}


def _term(rng: random.Random, labels: dict[str, str]) -> dict[str, Any]:
    draw = rng.random()
    if draw < 0.06:
        return {}
    if draw < 0.1:
        return {"matchExpressions": []}
    term: dict[str, Any] = {}
    if rng.random() < 0.9:
        term["matchExpressions"] = [_requirement(rng, labels) for _ in range(rng.randint(1, 2))]
    if rng.random() < 0.15 or not term:
        target = NODE_NAME if rng.random() < 0.7 else "some-other-node"
        term["matchFields"] = [{"key": "metadata.name", "operator": rng.choice(["In", "NotIn"]), "values": [target]}]
    return term


def _affinity(rng: random.Random, labels: dict[str, str]) -> dict[str, Any]:
    node_affinity: dict[str, Any] = {}
    if rng.random() < 0.35:
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [_term(rng, labels) for _ in range(rng.randint(1, 2))]}
    if rng.random() < 0.3:
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": rng.randint(1, 100), "preference": {"matchExpressions": [_requirement(rng, labels)]}}]
    affinity: dict[str, Any] = {"nodeAffinity": node_affinity} if node_affinity else {}
    if rng.random() < 0.015:
        affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": HOSTNAME, "labelSelector": {"matchLabels": {"app": "parity"}}}]}
    return affinity


def _tolerations(rng: random.Random) -> list[dict[str, Any]]:
    tolerations = []
    for key, value in TAINTS:
        if rng.random() < 0.3:
            toleration = {"key": key, "operator": rng.choice(["Equal", "Exists"])}
            if toleration["operator"] == "Equal":
                toleration["value"] = value if rng.random() < 0.8 else "other"
            if rng.random() < 0.5:
                toleration["effect"] = rng.choice(EFFECTS)
            tolerations.append(toleration)
    if rng.random() < 0.05:
        tolerations.append({"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"})
    if rng.random() < 0.05:
        tolerations.append({"operator": "Exists"})
    return tolerations


def _container(rng: random.Random, name: str, *, sidecar: bool = False, init: bool = False) -> dict[str, Any]:
    """A container's resources; an init container (`init`) asks for GPUs less often (gpuplace refuses those)."""
    requests: dict[str, str] = {"cpu": rng.choice(["100m", "500m", "1", "3", "6"]),
                                "memory": rng.choice(["256Mi", "1Gi", "3Gi", "6Gi", "12Gi"])}
    limits: dict[str, str] = {}
    if rng.random() < 0.15:
        requests["ephemeral-storage"] = rng.choice(["1Gi", "5Gi", "20Gi", "200Gi"])
    for resource, amounts, chance in (("hugepages-2Mi", ["32Mi", "512Mi"], 0.05), (FPGA, ["1", "2"], 0.07),
                                      ("nvidia.com/gpu", ["1", "2"], 0.1)):
        if rng.random() < chance / (3 if init and resource == "nvidia.com/gpu" else 1):
            # extended resources and hugepages: limit = request (API validation)
            requests[resource] = limits[resource] = rng.choice(amounts)
    body: dict[str, Any] = {"name": name, "image": IMAGE, "resources": {"requests": requests}}
    if limits:
        body["resources"]["limits"] = limits
    if sidecar:
        body["restartPolicy"] = "Always"
    return body


def random_pod_spec(rng: random.Random, labels: dict[str, str]) -> dict[str, Any]:
    """A pod spec drawn beside the node of `labels`, so that its rules match that node about as often as not."""
    spec: dict[str, Any] = {"terminationGracePeriodSeconds": 0}
    if rng.random() < 0.2:
        key = rng.choice(list(LABELS))
        spec["nodeSelector"] = {key: labels[key] if key in labels and rng.random() < 0.6 else rng.choice(LABELS[key])}
    if affinity := _affinity(rng, labels):
        spec["affinity"] = affinity
    if tolerations := _tolerations(rng):
        spec["tolerations"] = tolerations
    main = _container(rng, "c")
    if rng.random() < 0.2:
        main["ports"] = [{"containerPort": 8080, "hostPort": 8080, "protocol": "TCP"}]
    spec["containers"] = [main] + ([_container(rng, "c2")] if rng.random() < 0.15 else [])
    inits = [_container(rng, f"i{i}", sidecar=rng.random() < 0.5, init=True)
             for i in range(rng.choice([0, 0, 0, 1, 2]))]
    if inits:
        spec["initContainers"] = inits
    if rng.random() < 0.1:  # pod level: at least the containers' sum (API validation), here 8 CPU
        spec["resources"] = {"requests": {"cpu": "8"}}
    if rng.random() < 0.015:
        spec["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": "zone",
                                              "whenUnsatisfiable": "DoNotSchedule",
                                              "labelSelector": {"matchLabels": {"app": "parity"}}}]
    if rng.random() < 0.015:
        spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "parity-data"}}]
    return spec


def pinned(spec: dict[str, Any], name: str, node: str, scheduler: str | None) -> dict[str, Any]:
    """The pod of `spec` named `name`, pinned to `node` by hostname (NODE_NAME read as `node`), for `scheduler`
    (None: the default scheduler)."""
    body = _named(spec, node)
    body["nodeSelector"] = {**body.get("nodeSelector", {}), HOSTNAME: node}
    if scheduler:
        body["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "parity"}}, "spec": body}


def _named(value: Any, node: str) -> Any:
    if isinstance(value, dict):
        return {k: _named(v, node) for k, v in value.items()}
    if isinstance(value, list):
        return [_named(v, node) for v in value]
    return node if value == NODE_NAME else value


def port_holder(name: str, node: str) -> dict[str, Any]:
    """A pod bound directly with nodeName (no scheduler at all) that holds host port 8080 and a pod slot."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "nodeName": node, "terminationGracePeriodSeconds": 0, "tolerations": [{"operator": "Exists"}],
        "containers": [{"name": "c", "image": IMAGE, "ports": [{"containerPort": 8080, "hostPort": 8080}]}]}}


def unevaluated(spec: dict[str, Any]) -> bool:
    """Whether the spec carries a field gpuplace refuses to place by (adapters/kube/pod_rules.unevaluated_fields)."""
    inits = spec.get("initContainers") or ()
    return bool(spec.get("topologySpreadConstraints") or spec.get("volumes")
                or (spec.get("affinity") or {}).get("podAntiAffinity")
                or any("nvidia.com/gpu" in c["resources"].get("limits", {}) for c in inits))


__all__ = ["Case", "cases", "pinned", "port_holder", "random_node", "random_pod_spec", "unevaluated", "NODE_NAME",
           "HOSTNAME"]
