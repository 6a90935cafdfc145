"""The processes a bench run started from this test process, found in /proc: the checks that a run left none
running read them here."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path


def children() -> Iterator[tuple[int, dict[str, str]]]:
    """(pid, /proc/<pid>/status fields) of each process whose parent is this test process, zombies included."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        fields = {k: v.strip() for k, v in (line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)}
        if fields.get("PPid") == str(os.getpid()):
            yield int(entry), fields


def our_kube_schedulers() -> list[int]:
    """kube-scheduler processes whose parent is this test process."""
    return [pid for pid, fields in children() if fields.get("Name") == "kube-scheduler"]


def our_services(run_id: str) -> list[int]:
    """gpuplace service processes of the run still alive: children of this test process whose GPUPLACE_INSTANCE_ID
    names the run (PipelineRun.service_processes)."""
    found = []
    for pid, fields in children():
        if fields.get("State", "").startswith("Z"):
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        instance = next((v for v in environ if v.startswith(b"GPUPLACE_INSTANCE_ID=")), b"")
        if instance.endswith(f"-{run_id}".encode()):
            found.append(pid)
    return found
