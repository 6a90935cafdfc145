"""One more kube-apiserver on the shared stack, started by a test and stopped after it (`stack.sh apiserver`).

The stack's own apiservers are shared and never restarted; a test that needs one configured otherwise (an API
group turned off) gets its own: the stack's binary, certificates and etcd, its own etcd prefix and a free port.
Its objects are deleted from etcd when it stops.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from gpuplace.harness.stack_env import resolve, stack_dir

REPO = Path(__file__).resolve().parents[2]
STACK = REPO / "deploy" / "local" / "stack.sh"
ETCD = f"http://127.0.0.1:{os.environ.get('GPUPLACE_STACK_ETCD_PORT', '22379')}"  # stack.sh's default
# resource.k8s.io in every version the stack's Kubernetes serves. The Node authorizer watches ResourceSlices
# whenever DRA's feature gate is on, and since v1.37 it is locked on: without the API that watch never syncs and
# the apiserver never turns ready, so the DRA-less apiserver authorises with RBAC alone (as a 1.27-1.33 cluster
# without DRA never watched them).
WITHOUT_DRA = ("--runtime-config=resource.k8s.io/v1=false,resource.k8s.io/v1beta1=false,"
               "resource.k8s.io/v1beta2=false", "--authorization-mode=RBAC")


@dataclass(frozen=True)
class ExtraApiserver:
    name: str
    port: int
    kubeconfig: str
    log: Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stack_cache() -> str | None:
    """Where the stack's builds are: GPUPLACE_STACK_CACHE, else the folder above the kube-scheduler it wrote into
    its environment (a worktree has no .cache of its own)."""
    if cache := resolve("GPUPLACE_STACK_CACHE"):
        return cache
    scheduler = resolve("GPUPLACE_STACK_KUBE_SCHEDULER")
    return str(Path(scheduler).parent.parent) if scheduler else None


async def _ready(port: int) -> bool:
    pki = Path(stack_dir()) / "pki"
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    try:
        async with aiohttp.ClientSession() as session, session.get(
                f"https://127.0.0.1:{port}/readyz", ssl=context, timeout=aiohttp.ClientTimeout(total=3)) as response:
            return response.status == 200
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False


async def _delete_prefix(prefix: str) -> None:
    """Delete every key under `prefix` from the stack's etcd (its v3 JSON gateway: keys in base64)."""
    start = prefix.encode()
    end = start[:-1] + bytes([start[-1] + 1])
    body = {"key": base64.b64encode(start).decode(), "range_end": base64.b64encode(end).decode()}
    async with aiohttp.ClientSession() as session, session.post(f"{ETCD}/v3/kv/deleterange", json=body) as response:
        response.raise_for_status()


@contextlib.asynccontextmanager
async def extra_apiserver(name: str, *flags: str, timeout_s: float = 120.0) -> AsyncIterator[ExtraApiserver]:
    """A kube-apiserver `name` with `flags` replacing the stack's of the same name, ready; stopped and its etcd
    prefix deleted after the block."""
    port = _free_port()
    log = Path(stack_dir()) / "logs" / f"kube-apiserver-{name}.log"
    env = {**os.environ, "GPUPLACE_STACK_DIR": str(stack_dir())}
    if cache := _stack_cache():
        env["GPUPLACE_STACK_CACHE"] = cache
    with log.open("ab") as out:
        process = subprocess.Popen(["bash", str(STACK), "apiserver", name, str(port), *flags], env=env,
                                   stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not await _ready(port):
            if process.poll() is not None:
                pytest.fail(f"kube-apiserver {name} exited ({process.returncode}); its log: {log}")
            if loop.time() > deadline:
                pytest.fail(f"kube-apiserver {name} not ready after {timeout_s:.0f}s; its log: {log}")
            await asyncio.sleep(0.5)
        yield ExtraApiserver(name, port, str(Path(stack_dir()) / "kube" / name / "kubeconfig"), log)
    finally:
        process.terminate()
        try:
            await asyncio.to_thread(process.wait, 30)
        except subprocess.TimeoutExpired:
            process.kill()
            await asyncio.to_thread(process.wait, 10)
        await _delete_prefix(f"/registry-{name}/")
        shutil.rmtree(Path(stack_dir()) / "kube" / name, ignore_errors=True)


__all__ = ["WITHOUT_DRA", "ExtraApiserver", "extra_apiserver"]
