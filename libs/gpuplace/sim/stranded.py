"""Stranded GPU memory: free memory on devices that no pending claim can use.

`gpuplace bench dra` measures it when the first claim fails (and at the end of the run), from the devices'
capacity, what the allocated claims consume on each (their `consumedCapacity`), and the sizes of the claims still
pending. A device's free memory is usable when some pending claim could take it:

- a memory slice of `m` MiB on each of `k` devices: the device has at least `m` MiB free and its node has at least
  `k` such devices (the DRA allocator puts all devices of one request on one node);
- `k` whole devices: the device is untouched (a whole-device request consumes the device's full memory, so one
  already sharing memory cannot take it; dynamic-resource-allocation@v0.37.2
  structured/internal/incubating/consumable_capacity.go fillEmptyRequest) and its node has at least `k` untouched
  devices.

Everything else a device has free is stranded. CPU and host memory are not considered (the bench's nodes have
plenty), nor device attributes (the bench's claims select any GPU).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceUse:
    node: str  # whatever names the node uniquely (cluster/node)
    name: str
    capacity_mib: int
    used_mib: int

    @property
    def free_mib(self) -> int:
        return max(0, self.capacity_mib - self.used_mib)

    @property
    def untouched(self) -> bool:
        return self.used_mib == 0


@dataclass(frozen=True)
class Ask:
    """One pending claim: `devices` devices, each `memory_mib` of it, or whole when `memory_mib` is None."""

    devices: int
    memory_mib: int | None = None

    def __post_init__(self) -> None:
        if self.devices < 1:
            raise ValueError(f"a claim for {self.devices} devices")
        if self.memory_mib is not None and self.memory_mib < 1:
            raise ValueError(f"a memory slice of {self.memory_mib} MiB")


@dataclass(frozen=True)
class Stranded:
    stranded_mib: int
    free_mib: int
    capacity_mib: int
    pending: int

    @property
    def stranded_pct_of_free(self) -> float:
        return round(100.0 * self.stranded_mib / self.free_mib, 2) if self.free_mib else 0.0

    @property
    def stranded_pct_of_capacity(self) -> float:
        return round(100.0 * self.stranded_mib / self.capacity_mib, 2) if self.capacity_mib else 0.0


def usable(devices: Sequence[DeviceUse], asks: Iterable[Ask]) -> list[bool]:
    """Per device (in order): could some pending claim use its free memory?"""
    smallest_slice: dict[int, int] = {}  # devices per claim -> the smallest slice pending at that count
    fewest_whole: int | None = None
    for ask in asks:
        if ask.memory_mib is None:
            fewest_whole = ask.devices if fewest_whole is None else min(fewest_whole, ask.devices)
        else:
            smallest_slice[ask.devices] = min(ask.memory_mib, smallest_slice.get(ask.devices, ask.memory_mib))
    untouched = Counter(d.node for d in devices if d.untouched and d.capacity_mib > 0)
    fitting = {k: Counter(d.node for d in devices if d.free_mib >= m) for k, m in smallest_slice.items()}
    result = []
    for d in devices:
        ok = d.free_mib > 0 and (
            any(d.free_mib >= m and fitting[k][d.node] >= k for k, m in smallest_slice.items())
            or (fewest_whole is not None and d.untouched and untouched[d.node] >= fewest_whole))
        result.append(ok)
    return result


def stranded(devices: Sequence[DeviceUse], asks: Sequence[Ask]) -> Stranded:
    """Over devices that every ask could reach (one cluster: a claim is placed in its own cluster only)."""
    ok = usable(devices, asks)
    return Stranded(stranded_mib=sum(d.free_mib for d, u in zip(devices, ok, strict=True) if not u),
                    free_mib=sum(d.free_mib for d in devices), capacity_mib=sum(d.capacity_mib for d in devices),
                    pending=len(asks))


def combined(parts: Iterable[Stranded]) -> Stranded:
    """The figures of several clusters as one fleet's: sums."""
    parts = list(parts)
    return Stranded(stranded_mib=sum(p.stranded_mib for p in parts), free_mib=sum(p.free_mib for p in parts),
                    capacity_mib=sum(p.capacity_mib for p in parts), pending=sum(p.pending for p in parts))


__all__ = ["Ask", "DeviceUse", "Stranded", "combined", "stranded", "usable"]
