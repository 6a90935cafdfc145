"""Credentials that expire or are revoked, on the real stack (issue 37): readiness turns 503 naming the cluster and
the cause within a minute, and a fresh credential brings it back without a restart.

The identity is a ServiceAccount of the test's own with a token from the apiserver's TokenRequest API, as kubelet
projects one into a pod. Revoking it (deleting the ServiceAccount: the apiserver then rejects every token bound to
it) stands for expiry, whose shortest lifetime the apiserver allows is ten minutes. The token reaches gpuplace as
each kind of deployment hands it over: a kubeconfig's `tokenFile` (re-read when the file changes), an `exec` plugin
(run again before its credential expires), and the in-cluster configuration (kubernetes_asyncio's, the file re-read
every minute).
"""

from __future__ import annotations

import asyncio
import datetime
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.config import incluster_config

from gpuplace.adapters.kube.cluster_api import KubeClusterApi, connect, raw_json
from gpuplace.adapters.postgres import migrate
from gpuplace.bootstrap import cluster_api
from gpuplace.harness.stack_env import cluster_kubeconfigs, stack_dir
from gpuplace.settings import Settings
from tests.integration.conftest import eventually, run_id
from tests.integration.test_kube_api_readiness import metric, readyz, services

pytestmark = pytest.mark.integration
REVOKED_WITHIN_S = 60.0


class Identity:
    """A ServiceAccount bound to cluster-admin, and tokens for it; `revoke` deletes it, `renew` makes it again."""

    def __init__(self, api: KubeClusterApi, namespace: str, name: str) -> None:
        self.api, self.namespace, self.name = api, namespace, name
        self.rbac = client.RbacAuthorizationV1Api(api.api_client)

    async def create(self) -> None:
        await raw_json(await self.api.core.create_namespaced_service_account(
            self.namespace, {"metadata": {"name": self.name}}, _preload_content=False))

    async def token(self) -> str:
        body: Any = {"spec": {"expirationSeconds": 3600}}
        answer = await raw_json(await self.api.core.create_namespaced_service_account_token(
            self.name, self.namespace, body, _preload_content=False))
        return str(answer["status"]["token"])

    async def bind(self) -> None:
        await raw_json(await self.rbac.create_cluster_role_binding({
            "metadata": {"name": self.name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": self.name, "namespace": self.namespace}]},
            _preload_content=False))

    async def revoke(self) -> None:
        await raw_json(await self.api.core.delete_namespaced_service_account(self.name, self.namespace,
                                                                             _preload_content=False))

    async def unbind(self) -> None:
        await raw_json(await self.rbac.delete_cluster_role_binding(self.name, _preload_content=False))


def write_atomically(path: Path, text: str) -> None:
    """As kubelet swaps a projected token: a new file renamed over the old one."""
    fresh = path.with_suffix(".new")
    fresh.write_text(text)
    os.replace(fresh, path)


def stack_server() -> dict[str, Any]:
    """The `cluster` entry (server and CA) of the stack's first kubeconfig."""
    document = yaml.safe_load(Path(next(iter(cluster_kubeconfigs().values()))).read_text())
    return dict(document["clusters"][0]["cluster"])


def kubeconfig_with(path: Path, user: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": stack_server()}], "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return str(path)


def exec_plugin(directory: Path, token_file: Path) -> dict[str, Any]:
    """An exec plugin (as EKS's or GKE's) answering the token in `token_file`, expiring 302 s on: 2 s past
    kubernetes_asyncio's 5-minute margin, so each credential is due for renewal 2 s after it was taken."""
    plugin = directory / "token-plugin"
    plugin.write_text(
        "#!/bin/sh\n"
        "printf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
        f"\"status\":{{\"token\":\"%s\",\"expirationTimestamp\":\"%s\"}}}}' \"$(cat {token_file})\" "
        "\"$(date -u -d '+302 seconds' +%Y-%m-%dT%H:%M:%SZ)\"\n")
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    return {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
                     "interactiveMode": "Never"}}


@pytest.mark.parametrize("handed_over", ["tokenFile", "exec"])
async def test_a_revoked_token_turns_readyz_503_and_a_fresh_one_brings_it_back(
        kafka_bootstrap: str, database_url: str, tmp_path: Path, handed_over: str) -> None:
    run = run_id()
    namespace, cluster = f"cred-{run}", f"cred-{run}"
    await migrate.upgrade_async(database_url)
    async with cluster_api(next(iter(cluster_kubeconfigs().values()))) as admin:
        await raw_json(await admin.core.create_namespace({"metadata": {"name": namespace}}, _preload_content=False))
        identity = Identity(admin, namespace, f"gpuplace-{run}")
        await identity.create()
        await identity.bind()
        try:
            token_file = tmp_path / "token"
            write_atomically(token_file, await identity.token())
            user = {"tokenFile": str(token_file)} if handed_over == "tokenFile" else exec_plugin(tmp_path, token_file)
            kubeconfig = kubeconfig_with(tmp_path / "kubeconfig", user)
            settings = Settings(kafka_bootstrap=kafka_bootstrap, database_url=database_url, cluster=cluster,
                                kubeconfig=kubeconfig, kubeconfigs={cluster: kubeconfig},
                                topic_suffix=f".cred-{run}", namespace=namespace, leader_election_namespace=namespace,
                                node_label_selector=f"gpuplace.io/fleet={run}", http_port=0)
            async with services(settings) as url:
                await eventually(lambda: ready(url, 200), timeout_s=60, what="/readyz 200 with a valid token")

                await identity.revoke()
                revoked = asyncio.get_running_loop().time()
                # both services, each naming the cluster and the cause
                said = [f"{service}: cluster {cluster}: ApiNotReady: apiserver of cluster {cluster}: credentials "
                        "rejected (401)" for service in ("cluster-watcher", "placement")]
                body = await eventually(lambda: ready(url, 503, said), timeout_s=REVOKED_WITHIN_S,
                                        what=f"/readyz 503 saying {said}")
                took_s = asyncio.get_running_loop().time() - revoked
                assert "the token expired or was revoked" in body
                assert (await metric(url, "gpuplace_kube_api_failures_total", cluster=cluster, call="credentials",
                                     reason="unauthorized") or 0) > 0

                await identity.create()  # a new identity of that name, and a fresh token in the file
                write_atomically(token_file, await identity.token())
                renewed = asyncio.get_running_loop().time()
                await eventually(lambda: ready(url, 200), timeout_s=90, what="/readyz 200 with the fresh token")
                print(f"{handed_over}: 503 {took_s:.1f} s after the revocation, 200 again "
                      f"{asyncio.get_running_loop().time() - renewed:.1f} s after the fresh token")
        finally:
            await identity.unbind()
            await raw_json(await admin.core.delete_namespace(namespace, _preload_content=False))


async def test_in_cluster_configuration_reads_the_rotated_token(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """`in-cluster` as in a pod, its files and environment pointed at the test's: the token file re-read once a
    refresh period passed (a minute in kubernetes_asyncio, a second here), so a rotated token is used."""
    monkeypatch.setattr(incluster_config, "TOKEN_REFRESH_PERIOD", datetime.timedelta(seconds=1))
    server = stack_server()["server"].removeprefix("https://")
    host, _, port = server.rpartition(":")
    run = run_id()
    async with cluster_api(next(iter(cluster_kubeconfigs().values()))) as admin:
        await raw_json(await admin.core.create_namespace({"metadata": {"name": f"incl-{run}"}},
                                                         _preload_content=False))
        identity = Identity(admin, f"incl-{run}", f"gpuplace-{run}")
        await identity.create()
        try:
            token_file = tmp_path / "token"
            write_atomically(token_file, await identity.token())
            api_client = await connect("in-cluster", token_filename=str(token_file),
                                       cert_filename=str(Path(stack_dir()) / "pki" / "ca.crt"),
                                       environ={"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port})
            try:
                api = KubeClusterApi(api_client)
                assert (await api.version())["gitVersion"].startswith("v1.")
                await identity.revoke()
                await eventually(lambda: rejected(api), timeout_s=30, what="the revoked token rejected")
                await identity.create()
                write_atomically(token_file, await identity.token())
                await eventually(lambda: accepted(api), timeout_s=30, what="the rotated token accepted")
            finally:
                await api_client.close()
        finally:
            await raw_json(await admin.core.delete_namespace(f"incl-{run}", _preload_content=False))


async def ready(url: str, expected: int, lines: tuple[str, ...] | list[str] = ()) -> str | None:
    """/readyz's body when it answers `expected` with a line starting with each of `lines`, else None."""
    answer = await readyz(url)
    if answer is None or answer[0] != expected:
        return None
    got = answer[1].splitlines()
    return answer[1] if all(any(line.startswith(want) for line in got) for want in lines) else None


async def rejected(api: KubeClusterApi) -> bool:
    try:
        await api.version()
    except client.ApiException as exc:
        return exc.status == 401
    return False


async def accepted(api: KubeClusterApi) -> bool:
    return not await rejected(api)


async def test_an_identity_without_rbac_is_not_ready_saying_so(kafka_bootstrap: str, database_url: str,
                                                              tmp_path: Path) -> None:
    """Credentials accepted, but no ClusterRole bound: every watch answers 403, and /readyz says it is RBAC."""
    run = run_id()
    namespace, cluster = f"rbac-{run}", f"rbac-{run}"
    async with cluster_api(next(iter(cluster_kubeconfigs().values()))) as admin:
        await raw_json(await admin.core.create_namespace({"metadata": {"name": namespace}}, _preload_content=False))
        identity = Identity(admin, namespace, f"gpuplace-{run}")
        await identity.create()
        try:
            token_file = tmp_path / "token"
            write_atomically(token_file, await identity.token())
            kubeconfig = kubeconfig_with(tmp_path / "kubeconfig", {"tokenFile": str(token_file)})
            settings = Settings(kafka_bootstrap=kafka_bootstrap, database_url=database_url, cluster=cluster,
                                kubeconfig=kubeconfig, topic_suffix=f".rbac-{run}", leader_election=False,
                                http_port=0)
            async with services(settings, ("cluster-watcher",)) as url:
                said = [f"cluster-watcher: cluster {cluster}: ApiNotReady: apiserver of cluster {cluster}: nodes, "
                        "pods, resourceclaims, resourceslices watches failing: forbidden (403): the identity's RBAC "
                        "does not allow it"]
                await eventually(lambda: ready(url, 503, said), timeout_s=60, what=f"/readyz 503 saying {said}")
                assert (await metric(url, "gpuplace_kube_api_failures_total", cluster=cluster, call="pods",
                                     reason="forbidden") or 0) > 0
        finally:
            await raw_json(await admin.core.delete_namespace(namespace, _preload_content=False))
