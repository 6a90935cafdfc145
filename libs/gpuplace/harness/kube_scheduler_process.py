"""A kube-scheduler of the benchmark's own: the binary the local stack built, started with raised client limits.

`gpuplace bench pipeline --against kube-scheduler` must not touch the stack's kube-scheduler-<cluster>: it runs
with upstream's client rate limit (50 QPS, burst 100) and other sessions' tests rely on it. So the bench starts
one more kube-scheduler per apiserver, on a free loopback port, with

- its own `schedulerName` (a profile), so it and the stack's scheduler never compete for a pod;
- `clientConnection.qps`/`burst` raised (default 5000/10000): gpuplace's kube client has no rate limiter, so a
  comparison that left kube-scheduler's at 50/s would measure client-go's token bucket, not the scheduler;
- leader election off (one per cluster, as in the stack; a Lease would only add writes).

It is stopped when the context exits, including on an error or Ctrl-C (terminate, then kill after 10 s), and on
Linux it is also told to die with the harness (PR_SET_PDEATHSIG), so a harness killed outright leaves no
scheduler behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import aiohttp

from gpuplace.harness import stack_env

BINARY_VARIABLE = "GPUPLACE_STACK_KUBE_SCHEDULER"
DEFAULT_QPS = 5000.0
DEFAULT_BURST = 10000


@dataclass(frozen=True)
class ClientLimits:
    """KubeSchedulerConfiguration.clientConnection: client-go's token bucket for every API call of the scheduler."""

    qps: float = DEFAULT_QPS
    burst: int = DEFAULT_BURST

    def describe(self) -> str:
        return f"KubeSchedulerConfiguration clientConnection.qps {self.qps:g}, clientConnection.burst {self.burst}"


def find_binary(explicit: str | Path | None = None) -> Path:
    """The kube-scheduler to run: `explicit`, else $GPUPLACE_STACK_KUBE_SCHEDULER (environment, then the stack's
    env file), else the executable of the stack's running kube-scheduler (the stack's pid files), so the bench
    runs exactly the build the stack runs."""
    candidates: list[tuple[str, Path]] = []
    if explicit:
        candidates.append(("--kube-scheduler", Path(explicit)))
    elif variable := stack_env.resolve(BINARY_VARIABLE):
        candidates.append((BINARY_VARIABLE, Path(variable)))
    else:
        for pid_file in sorted((stack_env.stack_dir() / "pids").glob("kube-scheduler-*.pid")):
            with contextlib.suppress(OSError, ValueError):
                exe = Path(f"/proc/{int(pid_file.read_text().strip())}/exe").resolve(strict=True)
                candidates.append((f"the stack's running {pid_file.stem}", exe))
    for origin, path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise FileNotFoundError(f"kube-scheduler from {origin} ({path}) is not an executable file")
    raise FileNotFoundError(
        "no kube-scheduler binary found: pass --kube-scheduler PATH, set GPUPLACE_STACK_KUBE_SCHEDULER, or run "
        "`deploy/local/stack.sh up` (it builds kube-scheduler and runs one per cluster)")


async def binary_version(binary: Path) -> str:
    """`kube-scheduler --version` ("Kubernetes v1.34.4"), for the report."""
    proc = await asyncio.create_subprocess_exec(str(binary), "--version", stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    out, _ = await proc.communicate()
    return out.decode(errors="replace").strip()


def config_text(*, kubeconfig: str, scheduler_name: str, limits: ClientLimits) -> str:
    """The KubeSchedulerConfiguration (JSON is YAML): the client limits, one profile with the bench's name."""
    return json.dumps({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig, "qps": limits.qps, "burst": limits.burst},
        "leaderElection": {"leaderElect": False},
        "enableProfiling": False, "enableContentionProfiling": False,
        "profiles": [{"schedulerName": scheduler_name}],
    }, indent=2) + "\n"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn that asks Linux to SIGTERM the child when the harness dies; None elsewhere.

    Linux sends it when the *thread* that forked the child ends: here the event loop's thread (asyncio forks
    there), which outlives the scheduler as long as the loop runs the run (also from `asyncio.to_thread`)."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    pr_set_pdeathsig = 1
    prctl = libc.prctl

    def preexec() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM)

    return preexec


class KubeSchedulerProcess:
    """`async with KubeSchedulerProcess(...) as ks: await ks.wait_ready()`: one kube-scheduler, stopped on exit."""

    def __init__(self, binary: Path, *, kubeconfig: str, scheduler_name: str, limits: ClientLimits,
                 label: str = "kube-scheduler") -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig
        self.scheduler_name = scheduler_name
        self.limits = limits
        self.label = label
        self.port = 0
        self._dir: Path | None = None
        self._proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> KubeSchedulerProcess:
        self._dir = Path(tempfile.mkdtemp(prefix=f"gpuplace-{self.label}-"))
        config = self._dir / "config.yaml"
        config.write_text(config_text(kubeconfig=self.kubeconfig, scheduler_name=self.scheduler_name,
                                      limits=self.limits))
        self.port = _free_port()
        with (self._dir / "kube-scheduler.log").open("wb") as log:
            self._proc = await asyncio.create_subprocess_exec(
                str(self.binary), f"--config={config}", "--bind-address=127.0.0.1", f"--secure-port={self.port}",
                f"--cert-dir={self._dir / 'certs'}", stdin=asyncio.subprocess.DEVNULL, stdout=log,
                stderr=asyncio.subprocess.STDOUT, preexec_fn=_die_with_parent())  # noqa: PLW1509  # only prctl: no lock taken in the child
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        try:
            await self.stop()
        finally:
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within 10 s (also when this wait is cancelled)."""
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        try:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 10)
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()

    def log_tail(self, lines: int = 20) -> str:
        if self._dir is None:
            return ""
        with contextlib.suppress(OSError):
            return "\n".join((self._dir / "kube-scheduler.log").read_text(errors="replace").splitlines()[-lines:])
        return ""

    def exited(self) -> RuntimeError | None:
        """An error naming the exit status and the log's last lines, once the process has exited."""
        if self._proc is None or self._proc.returncode is None:
            return None
        return RuntimeError(f"{self.label} ({self.binary}) exited with status {self._proc.returncode}:\n"
                            f"{self.log_tail()}")

    async def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Until /readyz answers 200: serving, and its informers synced (the cluster's nodes are in its cache)."""
        url = f"https://127.0.0.1:{self.port}/readyz"
        deadline = time.monotonic() + timeout_s
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
            while time.monotonic() < deadline:
                if error := self.exited():
                    raise error
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with http.get(url, ssl=False) as response:  # its own self-signed serving certificate
                        if response.status == 200:
                            return
                await asyncio.sleep(0.2)
        raise TimeoutError(f"{self.label} was not ready on {url} within {timeout_s:.0f} s:\n{self.log_tail()}")

    async def run_until(self, stop: asyncio.Event) -> None:
        """Wait for `stop`; raise if the scheduler exits first (a bench measuring a dead scheduler would hang)."""
        assert self._proc is not None, "use `async with`"
        exited = asyncio.create_task(self._proc.wait())
        stopped = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({exited, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (exited, stopped):
                task.cancel()
        if error := self.exited():
            raise error


__all__ = ["BINARY_VARIABLE", "DEFAULT_BURST", "DEFAULT_QPS", "ClientLimits", "KubeSchedulerProcess", "binary_version",
           "config_text", "find_binary"]
