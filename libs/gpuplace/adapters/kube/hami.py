"""HAMi's node registration and its scheduler's pod annotations, read and written as HAMi's own code does. Pure.

HAMi's device plugin (with HAMi-core in the container) serves a pod only when a scheduler wrote, on the pod, the
devices it chose in HAMi's encoding; without them its Allocate fails with "no binding pod found on node". So on a
node that HAMi's device plugin registered, gpuplace binds a HAMi-vocabulary pod with exactly the annotations
HAMi's scheduler writes. Mirrored from Project-HAMi/HAMi@4707fb02c91c545bc7343ce26dba4c32919f9a3e (v2.10.0, 2026-08):

* pkg/device/nvidia/device.go: RegisterAnnos `hami.io/node-nvidia-register`, read by GetNodeDevices with
  device.UnMarshalNodeDevices (JSON); older device plugins wrote the colon/comma encoding that
  pkg/device/devices.go DecodeNodeDevices reads, which is read here too. PatchAnnotations writes the same
  encoded devices under `hami.io/vgpu-devices-to-allocate` (InRequestDevices) and
  `hami.io/vgpu-devices-allocated` (SupportDevices); Fit fills each device's type with the request's ("NVIDIA")
  and its memory with gpumem, else the device's registered memory times gpumem-percentage / 100.
* pkg/device/devices.go EncodePodSingleDevice / EncodeContainerDevices: per container (init containers first),
  each device "uuid,type,usedmem,usedcores" followed by ":", each container followed by ";".
* pkg/scheduler/scheduler.go Filter writes `hami.io/vgpu-node` and `hami.io/vgpu-time` (unix seconds) with the
  devices; Bind writes `hami.io/bind-phase: allocating` and `hami.io/bind-time` (unix seconds) before binding.
* pkg/util/util.go GetPendingPod (the device plugin): a Pending pod on the node with bind-time, bind-phase
  allocating (or success) and vgpu-node naming the node.

What gpuplace does not do of HAMi's Bind: take the node lock (`hami.io/mutex.lock`). Without it the device plugin
finds the pod by listing the node's pending pods (GetAllocatePodByNode returns nothing, GetPendingPod lists), and
releasing the lock is a no-op (pkg/util/nodelock/nodelock.go ReleaseNodeLock). Two pods reaching Allocate on one
node at the same moment can then be told apart only by kubelet's order (README, "Next to HAMi").
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

_T = TypeVar("_T")

HAMI_SOURCE = "Project-HAMi/HAMi@4707fb02c91c545bc7343ce26dba4c32919f9a3e"
REGISTER = "hami.io/node-nvidia-register"  # pkg/device/nvidia/device.go RegisterAnnos
HANDSHAKE = "hami.io/node-handshake"  # pkg/device/nvidia/device.go HandshakeAnnos
TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"  # InitNvidiaDevice: device.InRequestDevices["NVIDIA"]
ALLOCATED = "hami.io/vgpu-devices-allocated"  # InitNvidiaDevice: device.SupportDevices["NVIDIA"]
VGPU_NODE = "hami.io/vgpu-node"  # pkg/util/types.go AssignedNodeAnnotations
VGPU_TIME = "hami.io/vgpu-time"  # pkg/util/types.go AssignedTimeAnnotations
BIND_PHASE = "hami.io/bind-phase"  # pkg/util/types.go DeviceBindPhase
BIND_TIME = "hami.io/bind-time"  # pkg/util/types.go BindTimeAnnotations
ALLOCATING = "allocating"  # pkg/util/types.go DeviceBindAllocating
NVIDIA = "NVIDIA"  # pkg/device/nvidia/device.go NvidiaGPUDevice: the request's type, written on every device
HAMI_CORE = "hami-core"  # the mode gpuplace shares GPUs in; MIG and MPS devices are left out
DEVICE_SEP = ":"  # pkg/device/devices.go OneContainerMultiDeviceSplitSymbol
CONTAINER_SEP = ";"  # pkg/device/devices.go OnePodMultiContainerSplitSymbol

_INT32 = (-(2**31), 2**31 - 1)
_GO_INT = re.compile(r"[+-]?[0-9]+")  # strconv.ParseInt(s, 10, _) / Atoi: sign, ASCII digits, nothing else
_GO_BOOL = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
            "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}  # strconv.ParseBool


class RegistrationError(ValueError):
    """A node's HAMi registration annotation could not be read as HAMi reads it."""


@dataclass(frozen=True)
class HamiDevice:
    """One registered GPU (pkg/device/devices.go DeviceInfo, the fields HAMi registers)."""

    uuid: str
    count: int  # how many tasks may share it (deviceSplitCount)
    memory_mib: int  # registered memory (deviceMemoryScaling applied)
    cores: int
    type: str  # "NVIDIA-<model>"
    numa: int
    health: bool
    index: int
    mode: str


def registered_devices(annotations: Mapping[str, str]) -> list[HamiDevice] | None:
    """The node's GPUs gpuplace may place HAMi pods on, in gpuplace's index order; None when not registered.

    Devices in HAMi-core mode, ordered by their NVML index (stable: the legacy encoding has none, so its order
    stands). gpuplace's GPU index i is the i-th of them, on the node and at bind alike."""
    text = annotations.get(REGISTER)
    if text is None:
        return None
    devices = decode_registration(text)
    return sorted((d for d in devices if d.mode in (HAMI_CORE, "")), key=lambda d: d.index)


def decode_registration(text: str) -> list[HamiDevice]:
    """`hami.io/node-nvidia-register` -> its devices; JSON (today's device plugin) or the legacy encoding."""
    if text.lstrip().startswith("["):
        return _unmarshal(text)
    return _decode_legacy(text)


def _unmarshal(text: str) -> list[HamiDevice]:
    """device.UnMarshalNodeDevices: encoding/json into []*DeviceInfo; GetNodeDevices refuses an empty list.

    encoding/json matches keys case-insensitively and leaves absent (omitempty) fields at zero."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise RegistrationError(f"{REGISTER} is not JSON: {exc}") from None
    if not isinstance(raw, list) or not raw:
        raise RegistrationError(f"{REGISTER} lists no GPU")  # GetNodeDevices: "no gpu found on node"
    devices = []
    for item in raw:
        if not isinstance(item, dict):
            raise RegistrationError(f"{REGISTER}: a device is not an object: {item!r}")
        fields = {k.lower(): v for k, v in item.items()}
        devices.append(HamiDevice(
            uuid=_json(fields, "id", str, ""), count=_json_int(fields, "count", *_INT32),
            memory_mib=_json_int(fields, "devmem", *_INT32), cores=_json_int(fields, "devcore", *_INT32),
            type=_json(fields, "type", str, ""), numa=_json_int(fields, "numa", -(2**63), 2**63 - 1),
            health=_json(fields, "health", bool, False), index=_json_int(fields, "index", 0, 2**64 - 1),
            mode=_json(fields, "mode", str, ""),
        ))
    return devices


def _json(fields: Mapping[str, Any], key: str, kind: type[_T], default: _T) -> _T:
    value = fields.get(key)
    if value is None:
        return default
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise RegistrationError(f"{REGISTER}: {key} is not a {kind.__name__}: {value!r}")
    return value


def _json_int(fields: Mapping[str, Any], key: str, least: int, most: int) -> int:
    value = _json(fields, key, int, 0)
    if not least <= value <= most:
        raise RegistrationError(f"{REGISTER}: {key} out of range: {value}")
    return int(value)


def _decode_legacy(text: str) -> list[HamiDevice]:
    """pkg/device/devices.go DecodeNodeDevices, line for line: devices split by ":", fields by ","; 7 fields
    (mode hami-core, index 0) or 9 (index, mode)."""
    if DEVICE_SEP not in text:
        raise RegistrationError("node annotation missing device separator")
    devices = []
    for val in text.split(DEVICE_SEP):
        if val == "":
            continue
        if "," not in val:
            raise RegistrationError(f"malformed node annotation segment: {val!r}")
        items = val.split(",")
        if len(items) not in (7, 9):
            raise RegistrationError(f"unexpected field count {len(items)} in node annotation")
        count = _go_int(items[1], "count", *_INT32)
        devmem = _go_int(items[2], "memory", *_INT32)
        devcore = _go_int(items[3], "core", *_INT32)
        if items[6] not in _GO_BOOL:
            raise RegistrationError(f"invalid health field: {items[6]!r}")
        numa = _go_int(items[5], "numa", -(2**63), 2**63 - 1)
        mode, index = HAMI_CORE, 0
        if len(items) == 9:
            index = _go_int(items[7], "index", -(2**63), 2**63 - 1)
            if index < 0:
                raise RegistrationError(f"index field must not be negative: {index}")
            mode = items[8]
        devices.append(HamiDevice(uuid=items[0], count=count, memory_mib=devmem, cores=devcore, type=items[4],
                                  numa=numa, health=_GO_BOOL[items[6]], index=index, mode=mode))
    return devices


def _go_int(text: str, what: str, least: int, most: int) -> int:
    if not _GO_INT.fullmatch(text) or not least <= int(text) <= most:
        raise RegistrationError(f"invalid {what} field: {text!r}")
    return int(text)


@dataclass(frozen=True)
class ContainerDevice:
    """One device of one container as HAMi's pod annotation holds it (pkg/device/devices.go ContainerDevice)."""

    uuid: str
    type: str
    usedmem: int
    usedcores: int


def encode_pod_single_device(containers: Sequence[Sequence[ContainerDevice]]) -> str:
    """EncodePodSingleDevice: each container's EncodeContainerDevices, then ";" (an empty container too)."""
    return "".join("".join(f"{d.uuid},{d.type},{d.usedmem},{d.usedcores}{DEVICE_SEP}" for d in devices)
                   + CONTAINER_SEP for devices in containers)


def bind_annotations(request: Mapping[str, Any], devices: Sequence[HamiDevice], gpu_indices: Sequence[int],
                     node: str, now_s: int) -> dict[str, str]:
    """What HAMi's scheduler writes on a pod it placed on `node` (Filter's, then Bind's annotations), for the GPUs
    gpuplace chose: `request` is the pod's PodEvent.hami, `devices` the node's `registered_devices`.

    A chosen index the registration no longer has is a `RegistrationError` (the node re-registered since)."""
    if len(gpu_indices) != request["gpu_count"]:
        raise RegistrationError(f"{len(gpu_indices)} GPU(s) chosen for a HAMi request of {request['gpu_count']}")
    missing = [i for i in gpu_indices if not 0 <= i < len(devices)]
    if missing:
        raise RegistrationError(f"GPU index {missing} not in {REGISTER} ({len(devices)} HAMi-core GPU(s))")
    chosen = []
    for i in gpu_indices:
        device = devices[i]
        # Fit: a positive Memreq, else Totalmem * MemPercentagereq / 100 (int32, truncated)
        usedmem = request["memory_mib"] or device.memory_mib * request["memory_percent"] // 100
        chosen.append(ContainerDevice(device.uuid, NVIDIA, usedmem, request["cores"]))
    per_container: list[list[ContainerDevice]] = [[] for _ in range(request["containers"])]
    per_container[request["position"]] = chosen
    encoded = encode_pod_single_device(per_container)
    now = str(now_s)
    return {TO_ALLOCATE: encoded, ALLOCATED: encoded, VGPU_NODE: node, VGPU_TIME: now,
            BIND_PHASE: ALLOCATING, BIND_TIME: now}


__all__ = ["HAMI_SOURCE", "REGISTER", "HANDSHAKE", "TO_ALLOCATE", "ALLOCATED", "VGPU_NODE", "VGPU_TIME", "BIND_PHASE",
           "BIND_TIME", "ALLOCATING", "NVIDIA", "HamiDevice", "ContainerDevice", "RegistrationError",
           "registered_devices", "decode_registration", "encode_pod_single_device", "bind_annotations"]
