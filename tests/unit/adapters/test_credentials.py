"""Credentials that stay valid (adapters/kube/credentials.py): a token file read again when it changes, an exec
plugin run again when its credential nears expiry, or periodically when it gives none."""

from __future__ import annotations

import asyncio
import datetime
import os
from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio import client

from gpuplace.adapters.kube import credentials


def test_a_token_file_is_read_again_when_it_changes_and_only_then(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    configuration = client.Configuration()
    configuration.api_key["BearerToken"] = "Bearer first"
    hook = credentials.TokenFile(token, check_s=0.0)
    hook(configuration)
    assert configuration.api_key["BearerToken"] == "Bearer first"
    fresh = tmp_path / "token.new"
    fresh.write_text("second\n")
    os.replace(fresh, token)  # as kubelet swaps a projected token
    hook(configuration)
    assert configuration.api_key["BearerToken"] == "Bearer second"
    token.unlink()  # gone for a moment: the token held stays
    hook(configuration)
    assert configuration.api_key["BearerToken"] == "Bearer second"


def test_a_token_file_is_looked_at_no_more_than_once_a_period(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first")
    configuration = client.Configuration()
    hook = credentials.TokenFile(token, check_s=3600.0)
    token.write_text("second, longer")
    hook(configuration)
    assert "BearerToken" not in configuration.api_key  # not looked at yet: within the period


class Loader:
    """kubernetes_asyncio's KubeConfigLoader, as far as ExecCredential uses it."""

    def __init__(self, expiry: datetime.datetime | None) -> None:
        self.runs, self.token = 0, "Bearer t0"
        if expiry is not None:
            self.exec_plugin_expiry = expiry

    async def load_from_exec_plugin(self) -> bool:
        self.runs += 1
        self.token = f"Bearer t{self.runs}"
        return True


async def test_an_exec_credential_is_taken_again_only_when_due() -> None:
    now = datetime.datetime.now(datetime.UTC)
    configuration = client.Configuration()
    fresh = Loader(now + datetime.timedelta(hours=1))
    await credentials.ExecCredential(fresh)(configuration)
    assert fresh.runs == 0  # an hour left: nothing to do
    expiring = Loader(now + datetime.timedelta(minutes=4))  # within the 5-minute margin
    hook = credentials.ExecCredential(expiring)
    await asyncio.gather(*(hook(configuration) for _ in range(5)))
    assert expiring.runs >= 1 and configuration.api_key["BearerToken"] == f"Bearer t{expiring.runs}"
    undated = Loader(None)
    hook = credentials.ExecCredential(undated, refresh_s=3600.0)
    await hook(configuration)
    assert undated.runs == 0  # taken at load; again after refresh_s
    await credentials.ExecCredential(undated, refresh_s=0.0)(configuration)
    assert undated.runs == 1


async def test_a_failing_plugin_keeps_the_credential_held(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(Loader):
        async def load_from_exec_plugin(self) -> bool:
            raise RuntimeError("exec: process returned 1")

    configuration = client.Configuration()
    configuration.api_key["BearerToken"] = "Bearer held"
    await credentials.ExecCredential(Broken(None), refresh_s=0.0)(configuration)
    assert configuration.api_key["BearerToken"] == "Bearer held"
    assert "exec credential plugin failed" in caplog.text


async def test_load_picks_the_refresh_the_kubeconfigs_user_needs(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("abc")

    def kubeconfig(user: dict) -> str:
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": "https://apiserver.example:6443"}}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
        return str(path)

    configuration = client.Configuration()
    await credentials.load(kubeconfig({"tokenFile": "token"}), configuration)  # relative to the kubeconfig
    assert isinstance(configuration.refresh_api_key_hook, credentials.TokenFile)
    assert configuration.api_key["BearerToken"] == "Bearer abc"
    configuration = client.Configuration()
    await credentials.load(kubeconfig({"token": "static"}), configuration)
    assert configuration.refresh_api_key_hook is None
