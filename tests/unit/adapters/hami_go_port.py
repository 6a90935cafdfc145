"""HAMi's readers of its pod annotations, ported from Go line by line, to check gpuplace's writer against.

Source: Project-HAMi/HAMi@4707fb02c91c545bc7343ce26dba4c32919f9a3e (v2.10.0). Each function names the Go function
it ports; statements keep the Go order, errors are raised as `GoError` with the Go message. Kept apart from
gpuplace's own module (adapters/kube/hami.py) on purpose: a mistake copied into both would pass unnoticed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

OneContainerMultiDeviceSplitSymbol = ":"  # pkg/device/devices.go
OnePodMultiContainerSplitSymbol = ";"  # pkg/device/devices.go
InRequestDevices = {"NVIDIA": "hami.io/vgpu-devices-to-allocate"}  # pkg/device/nvidia/device.go InitNvidiaDevice
SupportDevices = {"NVIDIA": "hami.io/vgpu-devices-allocated"}
BindTimeAnnotations = "hami.io/bind-time"  # pkg/util/types.go
DeviceBindPhase = "hami.io/bind-phase"
AssignedNodeAnnotations = "hami.io/vgpu-node"
DeviceBindAllocating = "allocating"
DeviceBindSuccess = "success"


class GoError(Exception):
    pass


@dataclass
class ContainerDevice:  # pkg/device/devices.go ContainerDevice (Idx, Slots, CustomInfo unused by the codec)
    UUID: str = ""
    Type: str = ""
    Usedmem: int = 0
    Usedcores: int = 0


def _parse_int32(s: str) -> int:
    """strconv.ParseInt(s, 10, 32)."""
    if not re.fullmatch(r"[+-]?[0-9]+", s) or not -(2**31) <= int(s) <= 2**31 - 1:
        raise GoError(f'strconv.ParseInt: parsing "{s}": invalid syntax or out of range')
    return int(s)


def EncodeContainerDevices(cd: list[ContainerDevice]) -> str:
    # for _, val := range cd { fmt.Fprintf(&builder, "%s,%s,%d,%d%s", val.UUID, val.Type, val.Usedmem,
    #                          val.Usedcores, OneContainerMultiDeviceSplitSymbol) }
    builder = ""
    for val in cd:
        builder += f"{val.UUID},{val.Type},{val.Usedmem:d},{val.Usedcores:d}{OneContainerMultiDeviceSplitSymbol}"
    return builder


def EncodePodSingleDevice(pd: list[list[ContainerDevice]]) -> str:
    res = ""
    for ctrdevs in pd:
        res = res + EncodeContainerDevices(ctrdevs)
        res = res + OnePodMultiContainerSplitSymbol
    return res


def DecodeContainerDevices(s: str) -> list[ContainerDevice]:
    if len(s) == 0:
        return []
    cd = s.split(OneContainerMultiDeviceSplitSymbol)
    contdev: list[ContainerDevice] = []
    tmpdev = ContainerDevice()
    for val in cd:
        if "," in val:
            tmpstr = val.split(",")
            if len(tmpstr) < 4:
                raise GoError("pod annotation format error, missing fields, do not use nodeName in task spec")
            tmpdev.UUID = tmpstr[0]
            tmpdev.Type = tmpstr[1]
            tmpdev.Usedmem = _parse_int32(tmpstr[2])
            tmpdev.Usedcores = _parse_int32(tmpstr[3])
            contdev.append(ContainerDevice(tmpdev.UUID, tmpdev.Type, tmpdev.Usedmem, tmpdev.Usedcores))  # by value
    return contdev


def DecodePodDevices(checklist: dict[str, str], annos: dict[str, str]) -> dict[str, list[list[ContainerDevice]]]:
    if len(annos) == 0:
        return {}
    pd: dict[str, list[list[ContainerDevice]]] = {}
    for devID, devs in checklist.items():
        if devs not in annos:
            continue
        s = annos[devs]
        pd[devID] = []
        for part in s.split(OnePodMultiContainerSplitSymbol):  # strings.SplitSeq
            cd = DecodeContainerDevices(part)
            pd[devID].append(cd)  # empty ones kept: index i is container i (init containers first)
    return pd


@dataclass
class Pod:
    """What the device plugin reads of a pod."""

    name: str
    phase: str
    node_name: str
    annotations: dict[str, str] = field(default_factory=dict)
    init_containers: list[str] = field(default_factory=list)
    containers: list[str] = field(default_factory=list)


def GetPendingPod(pods: list[Pod], node: str) -> Pod:
    """pkg/util/util.go GetPendingPod, the list path (no node lock: GetAllocatePodByNode returns nil, nil)."""
    for p in pods:
        if p.node_name != node:  # FieldSelector spec.nodeName=node
            continue
        if p.phase != "Pending":
            continue
        if BindTimeAnnotations not in p.annotations:
            continue
        if DeviceBindPhase not in p.annotations:
            continue
        phase = p.annotations[DeviceBindPhase]
        if phase != DeviceBindAllocating and phase != DeviceBindSuccess:
            continue
        if AssignedNodeAnnotations not in p.annotations:
            continue
        if p.annotations[AssignedNodeAnnotations] == node:
            return p
    raise GoError(f"no binding pod found on node {node}")


def decodePodSingleDevice(dtype: str, p: Pod) -> list[list[ContainerDevice]]:
    """pkg/device-plugin/nvidiadevice/nvinternal/plugin/util.go decodePodSingleDevice."""
    pdevices = DecodePodDevices(InRequestDevices, p.annotations)
    if dtype not in pdevices:
        raise GoError("device request not found")
    return pdevices[dtype]


def popNextContainerDevices(pod: Pod, podSingleDev: list[list[ContainerDevice]]) -> tuple[str, list[Any]]:
    """plugin/util.go popNextContainerDevices: the first non-empty entry, erased, and its container's name."""
    initContainerCount = len(pod.init_containers)
    for i, ctrDevs in enumerate(podSingleDev):
        if len(ctrDevs) > 0:
            podSingleDev[i] = []
            if i < initContainerCount:
                return pod.init_containers[i], ctrDevs
            regularIdx = i - initContainerCount
            if regularIdx >= len(pod.containers):
                raise GoError(f"container index {i} out of range (init={initContainerCount}, "
                              f"regular={len(pod.containers)})")
            return pod.containers[regularIdx], ctrDevs
    raise GoError("no pending device allocation found")
