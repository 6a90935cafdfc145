"""A pod spec's node rules (nodeSelector, node affinity, tolerations, host ports) as PodEvent fields. Pure.

The shapes are core/v1's, read as the API serves them (camelCase JSON); only what kube-scheduler's
NodeAffinity, TaintToleration and NodePorts filters read is kept. What else in a spec limits where kube-scheduler
may put a pod, and gpuplace does not evaluate (inter-pod affinity, topology spread, the volumes kube-scheduler's
volume plugins place by, GPUs asked by init containers), is named by `unevaluated_fields`: such a pod is refused
with those names on it, never placed as if they were absent (README, "What gpuplace checks").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuplace.adapters.kube.vocabulary import gpu_resource
from gpuplace.contracts.events import HostPort, PreferredTerm, Requirement, SelectorTerm, Toleration

Json = Mapping[str, Any]


def rule_fields(spec: Json) -> dict[str, Any]:
    """The node-rule fields of a PodEvent from the pod's spec (absent rules stay at their defaults)."""
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return {
        "node_selector": dict(spec.get("nodeSelector") or {}),
        "required_terms": tuple(_term(t) for t in required.get("nodeSelectorTerms") or ()),
        "preferred_terms": tuple(
            PreferredTerm(weight=p["weight"], term=_term(p.get("preference") or {}))
            for p in node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
        ),
        "tolerations": tuple(
            Toleration(key=t.get("key") or "", operator=t.get("operator") or "Equal", value=t.get("value") or "",
                       effect=t.get("effect") or "")
            for t in spec.get("tolerations") or ()
        ),
        "host_ports": tuple(
            HostPort(port=p["hostPort"], protocol=p.get("protocol") or "TCP", host_ip=p.get("hostIP") or "")
            for c in spec.get("containers") or () for p in c.get("ports") or () if p.get("hostPort")
        ),
    }


# Volume sources kube-scheduler places by (v1.37): PVCs and generic ephemeral volumes (VolumeBinding, VolumeZone,
# NodeVolumeLimits, VolumeRestrictions' ReadWriteOncePod), the in-tree disks CSI migration counts against a node's
# attach limit (NodeVolumeLimits), and the disks VolumeRestrictions refuses to share (GCE PD, EBS, RBD, iSCSI).
SCHEDULED_VOLUMES = ("persistentVolumeClaim", "ephemeral", "gcePersistentDisk", "awsElasticBlockStore", "azureDisk",
                     "azureFile", "cinder", "vsphereVolume", "portworxVolume", "rbd", "iscsi")


def unevaluated_fields(spec: Json) -> tuple[str, ...]:
    """The fields of `spec` that constrain its node in kube-scheduler and that gpuplace does not evaluate, as paths
    (`spec.affinity.podAntiAffinity`, `spec.volumes[2].persistentVolumeClaim`); empty for most pods."""
    affinity = spec.get("affinity") or {}
    found = [f"spec.affinity.{kind}" for kind in ("podAffinity", "podAntiAffinity") if affinity.get(kind)]
    if spec.get("topologySpreadConstraints"):
        found.append("spec.topologySpreadConstraints")
    found += [f"spec.volumes[{i}].{source}" for i, volume in enumerate(spec.get("volumes") or ())
              for source in SCHEDULED_VOLUMES if volume.get(source) is not None]
    found += [f"spec.initContainers[{i}].resources.{kind}[{name}]"  # GPUs are read from the app containers
              for i, c in enumerate(spec.get("initContainers") or ()) for kind in ("requests", "limits")
              for name in ((c.get("resources") or {}).get(kind) or {}) if gpu_resource(name)][:1]
    return tuple(found)


def _term(term: Json) -> SelectorTerm:
    def requirements(key: str) -> tuple[Requirement, ...]:
        return tuple(Requirement(key=r["key"], operator=r["operator"], values=tuple(r.get("values") or ()))
                     for r in term.get(key) or ())
    return SelectorTerm(match_expressions=requirements("matchExpressions"), match_fields=requirements("matchFields"))


__all__ = ["rule_fields", "unevaluated_fields", "SCHEDULED_VOLUMES"]
