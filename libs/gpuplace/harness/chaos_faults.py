"""The faults of `gpuplace bench chaos`: service processes killed with SIGKILL, Kafka and PostgreSQL restarted.

Services run as separate OS processes (`gpuplace service NAME`, configured only by GPUPLACE_* variables, as a
deployment runs them), because the claim under test is about processes dying at any instant: an in-process task
that is cancelled runs its `finally` blocks, a SIGKILLed process runs nothing. Each process is started in its
own session, so the bench signals exactly what it started, by process group, and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import gpuplace
from gpuplace.harness import stack_env


@dataclass
class ExitRecord:
    """A service process that ended without being killed by the bench: a crash worth reading."""

    service: str
    code: int | None
    at_s: float
    error: str  # the last lines of its log: usually the exception it died of


@dataclass
class ServiceProcess:
    """One `gpuplace service NAME` process, restartable; its output is appended to `log`."""

    label: str  # unique in the run: "placement", "cluster-watcher:east-ab12", ...
    service: str
    env: dict[str, str]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    _log_file: IO[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        self._log_file = self._log_file or self.log.open("ab")
        self._log_file.write(f"=== {time.strftime('%H:%M:%S')} start #{self.starts + 1}\n".encode())
        self._log_file.flush()
        self.process = subprocess.Popen(service_argv(self.service), env=self.env, stdout=self._log_file,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self.starts += 1

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill9(self) -> None:
        """SIGKILL to the process group this object started: no shutdown code runs, as in a node crash."""
        if self.alive:
            assert self.process is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM (a clean shutdown), SIGKILL after `timeout_s`."""
        if self.alive:
            assert self.process is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill9()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def log_tail(self, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""


def service_argv(service: str) -> list[str]:
    """`gpuplace service NAME` from the same environment as this process (the venv's console script)."""
    script = Path(sys.executable).with_name("gpuplace")
    if script.exists():
        return [str(script), "service", service]
    found = shutil.which("gpuplace")
    return [found, "service", service] if found else [sys.executable, "-m", "gpuplace.cli.app", "service", service]


def service_env(settings: dict[str, str]) -> dict[str, str]:
    """The parent's environment without any GPUPLACE_*/KUBECONFIG variable, then exactly `settings`: a service
    must not pick up the stack's KUBECONFIG or another run's topic suffix by accident."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLACE_") and k != "KUBECONFIG"}
    return {**base, "PYTHONUNBUFFERED": "1", **settings}


class Supervisor:
    """Keeps the run's service processes up: restarts what the bench killed after its delay, and what died on
    its own at once, recording the latter as an unexpected exit."""

    def __init__(self, processes: list[ServiceProcess], clock0: float | None = None) -> None:
        self.processes = {p.label: p for p in processes}
        self.kills: dict[str, int] = {}
        self.kill_log: list[dict[str, float | str]] = []
        self.unexpected: list[ExitRecord] = []
        self._down_until: dict[str, float] = {}  # killed by the bench: restart at this monotonic time
        self._started = time.monotonic() if clock0 is None else clock0  # the run's clock: at_s counts from here

    def start_all(self) -> None:
        for process in self.processes.values():
            process.start()

    def kill(self, label: str, restart_after_s: float) -> bool:
        """SIGKILL one service now, restart it after the delay; False if it is already down."""
        process = self.processes[label]
        if not process.alive or label in self._down_until:
            return False
        process.kill9()
        self._down_until[label] = time.monotonic() + restart_after_s
        self.kills[process.service] = self.kills.get(process.service, 0) + 1
        self.kill_log.append({"at_s": round(time.monotonic() - self._started, 1), "service": label,
                              "down_s": round(restart_after_s, 1)})
        return True

    def tick(self) -> None:
        """Restart what is due; record and restart what exited without being killed."""
        now = time.monotonic()
        for label, process in self.processes.items():
            if label in self._down_until:
                if now >= self._down_until[label]:
                    del self._down_until[label]
                    process.start()
            elif process.process is not None and not process.alive:
                self.unexpected.append(ExitRecord(label, process.process.returncode, round(now - self._started, 1),
                                                  process.log_tail(3)))
                process.start()

    async def run(self, stop: asyncio.Event, interval_s: float = 0.25) -> None:
        while not stop.is_set():
            self.tick()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)

    def all_up(self) -> bool:
        return not self._down_until and all(p.alive for p in self.processes.values())

    def stop_all(self) -> None:
        self._down_until.clear()
        for process in self.processes.values():
            process.stop()


# -- Kafka and PostgreSQL ---------------------------------------------------------------------------------------
# `stack.sh restart NAME` stops a component by its recorded process group and starts it as `stack.sh up` would:
# the bench never guesses at process names or ports.


def stack_script() -> Path:
    """deploy/local/stack.sh of the checkout gpuplace runs from (an editable install: libs/gpuplace -> repo root)."""
    return Path(gpuplace.__file__).resolve().parents[2] / "deploy" / "local" / "stack.sh"


async def restart_component(name: str, log: Path, timeout_s: float = 240.0) -> float:
    """Stop and start one stack component (kafka, postgres); the seconds it was away. Raises if it failed."""
    script = stack_script()
    if not script.exists():
        raise FileNotFoundError(f"no local stack script at {script}: Kafka/PostgreSQL restarts need a checkout")
    env = {**os.environ, "GPUPLACE_STACK_DIR": str(stack_env.stack_dir())}
    started = time.monotonic()
    with log.open("ab") as out:
        proc = await asyncio.create_subprocess_exec("bash", str(script), "restart", name, stdout=out,
                                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        try:
            code = await asyncio.wait_for(proc.wait(), timeout_s)
        except TimeoutError:
            proc.kill()
            raise
    if code != 0:
        raise RuntimeError(f"restarting {name} failed (exit {code}); see {log}")
    return time.monotonic() - started


__all__ = ["ExitRecord", "ServiceProcess", "Supervisor", "service_argv", "service_env", "restart_component",
           "stack_script"]
