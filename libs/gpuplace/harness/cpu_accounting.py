"""CPU seconds each part of the local stack spends during a bench run, read from /proc (Linux).

On a two-core machine the apiservers, etcd, Kafka and PostgreSQL share the cores with the scheduler under test,
so binds/s is as much a question of CPU as of design: a burst both schedulers drain at the rate the apiservers
accept pods leaves the scheduler only the CPU the apiservers do not use. `bench pipeline --against
kube-scheduler` reports, beside each run's binds/s, what every component spent while it ran, so the report says
where the time went rather than leaving it to be guessed.

A sample sums utime + stime (/proc/PID/stat, fields 14 and 15) per component, the component known by the
process's name (and, for Java, its command line). The scheduler under test is what this process started for
the run: its children alive at the sample, plus the children it has reaped (its own cutime + cstime, fields 16
and 17), so services stopped before the run's end are counted too. PostgreSQL's backends end with their
sessions, so its postmaster's reaped children count as PostgreSQL. This process itself is the load (pods
submitted, watched until bound) and is reported apart.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path

SCHEDULER = "scheduler under test"
OTHER = "other"
WALL = "wall_s"
"""The key a run's measurement keeps the window's wall time under (not a component)."""
BENCH = "bench (submits and watches)"
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

COMPONENTS = ("kube-apiserver", "etcd", "kafka", "postgres", "kwok + controller-manager", SCHEDULER, BENCH)
"""The components a sample reports, in the report's order; anything else on the machine is OTHER (on a shared
machine, other work: its figure is a floor, as a process that exits between two samples takes its time with it)."""


def _stat(pid: str) -> tuple[str, int, list[int]] | None:
    """(comm, ppid, [utime, stime, cutime, cstime] in ticks) of a process, None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = raw[raw.index("(") + 1:raw.rindex(")")]
    rest = raw[raw.rindex(")") + 2:].split()  # field 3 (state) onwards
    return comm, int(rest[1]), [int(x) for x in rest[11:15]]


def _component(pid: str, comm: str, ppid: int, me: int) -> str:
    if ppid == me:
        return SCHEDULER
    if comm == "kube-apiserver" or comm == "etcd":
        return comm
    if comm.startswith("postgres"):
        return "postgres"
    if comm == "java":
        try:
            return "kafka" if b"kafka" in Path(f"/proc/{pid}/cmdline").read_bytes() else OTHER
        except OSError:
            return OTHER
    if comm in ("kwok", "kube-controller"):  # comm is cut at 15 characters
        return "kwok + controller-manager"
    return OTHER


def sample() -> dict[str, float]:
    """CPU seconds used so far by each component (COMPONENTS, and `other`), summed over its processes."""
    me = os.getpid()
    found: dict[str, float] = dict.fromkeys((*COMPONENTS, OTHER), 0.0)
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        stat = _stat(pid)
        if stat is None:
            continue
        comm, ppid, (utime, stime, cutime, cstime) = stat
        if int(pid) == me:
            found[BENCH] += (utime + stime) / _TICKS
            found[SCHEDULER] += (cutime + cstime) / _TICKS  # children reaped: services already stopped
            continue
        component = _component(pid, comm, ppid, me)
        reaped = cutime + cstime if component == "postgres" else 0  # the postmaster's: backends of closed sessions
        found[component] += (utime + stime + reaped) / _TICKS
    return found


def mark() -> dict[str, float]:
    """A sample with the monotonic time it was taken, under WALL: spent() between two marks gives the window's
    wall time too."""
    return {**sample(), WALL: time.monotonic()}


def spent(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """CPU seconds each component used between two samples, rounded to 0.1 s (never below 0: a process that
    left between the samples takes its time with it, unless it was a reaped child of ours); between two marks,
    the seconds between them too (WALL)."""
    return {k: round(max(after.get(k, 0.0) - before.get(k, 0.0), 0.0), 1) for k in after}


__all__ = ["BENCH", "COMPONENTS", "OTHER", "SCHEDULER", "WALL", "mark", "sample", "spent"]
