"""`connect`: the apiserver's proxy is looked up once from the environment, and the client's session does not look
it up (nor ~/.netrc) again on every request (aiohttp's trust_env, which kubernetes_asyncio turns on)."""

from pathlib import Path

import pytest
import yaml

from gpuplace.adapters.kube.cluster_api import connect, env_proxy


def _kubeconfig(tmp_path: Path, server: str) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return str(path)


@pytest.fixture(autouse=True)
def _no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)


async def test_the_session_does_not_read_the_environment_per_request(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://user:secret@proxy.local:3128")
    api = await connect(_kubeconfig(tmp_path, "https://apiserver.example:6443"))
    try:
        assert api.rest_client.pool_manager.trust_env is False
        assert api.rest_client.proxy == "http://proxy.local:3128"
        assert api.rest_client.proxy_headers["Proxy-Authorization"].startswith("Basic ")
    finally:
        await api.close()


def test_no_proxy_covers_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.local:3128")
    monkeypatch.setenv("NO_PROXY", "apiserver.example")
    assert env_proxy("https://apiserver.example:6443") == (None, None)
    monkeypatch.delenv("NO_PROXY")
    assert env_proxy("https://apiserver.example:6443") == ("http://proxy.local:3128", None)
