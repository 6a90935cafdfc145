"""Credentials that stay valid: a token is read again when it changes, an exec plugin run again before expiry.

kubernetes_asyncio reads a kubeconfig once: the token of its `tokenFile`, or of its `exec` plugin, stays the one it
read at start. A pod's ServiceAccount token is projected with an hour's lifetime and rotated by kubelet, and the
tokens EKS, GKE and AKS plugins hand out last minutes to an hour: after that every call gets 401, and a
long-running service never recovers without a restart. Here, as client-go does:

- `in-cluster` (GPUPLACE_KUBECONFIG=in-cluster, what the Helm chart sets for the cluster it runs in): kubernetes_
  asyncio's in-cluster configuration, the apiserver from KUBERNETES_SERVICE_HOST/PORT, the mounted ServiceAccount
  CA, and the token file read again every minute (its `try_refresh_token`);
- a kubeconfig whose user has `tokenFile` (and no `token`): the file's token is read again when the file changes
  (its modification time, looked at once a second at most: kubelet and a Secret's projection swap it atomically);
- a kubeconfig whose user has `exec`: the plugin is run again when its credential nears its
  `expirationTimestamp` (kubernetes_asyncio's 5-minute margin), or every EXEC_REFRESH_S when it gives none.
  The plugin's binary must be in the image (gpuplace's has none; mount or build one in).

Each is a `refresh_api_key_hook` of the client's Configuration, which the client calls before every request.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client, config
from kubernetes_asyncio.config import incluster_config
from kubernetes_asyncio.config.kube_config import KubeConfigLoader

log = logging.getLogger(__name__)

IN_CLUSTER = "in-cluster"
"""GPUPLACE_KUBECONFIG(S) value for the cluster the pod runs in, through its ServiceAccount."""
TOKEN_FILE_CHECK_S = 1.0
EXEC_REFRESH_S = 600.0  # an exec credential without an expiry is taken again this often
EXEC_SKEW = datetime.timedelta(minutes=5)  # kubernetes_asyncio's EXPIRY_SKEW_PREVENTION_DELAY


async def load(kubeconfig: str, configuration: client.Configuration, **in_cluster: Any) -> None:
    """Fill `configuration` from `kubeconfig` (a path, or IN_CLUSTER), with the refresh the credential needs.
    `in_cluster`: token_filename, cert_filename, environ for kubernetes_asyncio's in-cluster loader (tests)."""
    if kubeconfig == IN_CLUSTER:
        # the ignore: kubernetes_asyncio leaves its in-cluster loader unannotated (it returns None)
        incluster_config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration, try_refresh_token=True, **in_cluster)
        return
    loader = await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration,
                                           persist_config=False)
    user = _current_user(kubeconfig)
    if "exec" in user:
        configuration.refresh_api_key_hook = ExecCredential(loader)
    elif user.get("tokenFile") and not user.get("token"):
        path = Path(str(user["tokenFile"]))
        configuration.refresh_api_key_hook = TokenFile(path if path.is_absolute() else
                                                       Path(kubeconfig).parent / path)


def _current_user(kubeconfig: str) -> dict[str, Any]:
    """The `user` of the kubeconfig's current context ({} when it has none)."""
    document = yaml.safe_load(Path(kubeconfig).read_text()) or {}
    contexts = {c.get("name"): c.get("context") or {} for c in document.get("contexts") or ()}
    name = contexts.get(document.get("current-context"), {}).get("user")
    users = {u.get("name"): u.get("user") or {} for u in document.get("users") or ()}
    return dict(users.get(name, {}))


class TokenFile:
    """Reads the bearer token from `path` again whenever the file changed (checked at most once a second)."""

    def __init__(self, path: Path, *, check_s: float = TOKEN_FILE_CHECK_S) -> None:
        self._path, self._check_s = path, check_s
        self._checked = time.monotonic()
        self._stamp = self._stat()  # the token read with the kubeconfig is this one

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            found = os.stat(self._path)  # follows the ..data symlink kubelet swaps
        except OSError:
            return None
        return found.st_ino, found.st_mtime_ns, found.st_size

    def __call__(self, configuration: client.Configuration) -> None:
        now = time.monotonic()
        if now - self._checked < self._check_s:
            return
        self._checked = now
        stamp = self._stat()
        if stamp is None or stamp == self._stamp:
            return  # gone for a moment (a swap), or unchanged: keep the token held
        try:
            token = self._path.read_text().strip()
        except OSError as exc:
            log.warning("token file %s not read again (%s); keeping the token held", self._path, exc)
            return
        self._stamp = stamp
        if token:
            configuration.api_key["BearerToken"] = f"Bearer {token}"
            log.info("token file %s changed: its new token is used from now on", self._path)


class ExecCredential:
    """Runs the kubeconfig's exec plugin again before its credential expires (see the module docstring)."""

    def __init__(self, loader: KubeConfigLoader, *, refresh_s: float = EXEC_REFRESH_S) -> None:
        self._loader = loader
        self._refresh_s = refresh_s
        self._ran = time.monotonic()
        self._lock = asyncio.Lock()

    def _due(self) -> bool:
        expiry = getattr(self._loader, "exec_plugin_expiry", None)
        if expiry is None:
            return time.monotonic() - self._ran >= self._refresh_s
        return bool(expiry - EXEC_SKEW <= datetime.datetime.now(datetime.UTC))

    async def __call__(self, configuration: client.Configuration) -> None:
        if not self._due():
            return
        async with self._lock:  # the requests waiting meanwhile use the plugin's one answer
            if not self._due():
                return
            self._ran = time.monotonic()  # a plugin that fails is tried again after as long as one that works
            try:
                await self._loader.load_from_exec_plugin()
            except Exception as exc:  # noqa: BLE001 - the request goes on with the credential held (a 401 says so)
                log.warning("exec credential plugin failed (%s); keeping the credential held", exc)
                return
        token = getattr(self._loader, "token", None)
        if token:
            configuration.api_key["BearerToken"] = token


__all__ = ["EXEC_REFRESH_S", "ExecCredential", "IN_CLUSTER", "TokenFile", "load"]
