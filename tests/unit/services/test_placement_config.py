"""Placement's start-up: a bad policy setting is refused before it connects to anything, and its settings reach the
service it builds."""

import asyncio
import contextlib
import types

import pytest

from gpuplace.settings import ConfigurationError, Settings
from gpuplace.usecases.binder import BIND_CONCURRENCY
from services.placement import app


def test_a_bad_expected_shape_stops_placement_before_it_connects(monkeypatch):
    def connect(*args, **kwargs):
        raise AssertionError("connected despite the bad setting")

    monkeypatch.setattr(app, "resources", connect)
    settings = Settings(kubeconfig="/dev/null", expected_shapes="8xgpu,8xGPU")
    with pytest.raises(ConfigurationError, match=r"GPUPLACE_EXPECTED_SHAPES: expected shape '8xGPU'"):
        asyncio.run(app.run(settings, asyncio.Event()))


def test_the_bind_concurrency_setting_reaches_the_placement_service(monkeypatch):
    """GPUPLACE_BIND_CONCURRENCY (default 64) is what the service's binder is given."""
    seen = {}

    class Stop(Exception):
        pass

    class Resources:
        uow_factory = broker = None
        cluster_apis: dict = {}

    @contextlib.asynccontextmanager
    async def resources(*args, **kwargs):
        yield Resources()

    def service(*args, **kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(app, "resources", resources)
    monkeypatch.setattr(app, "OutboxRelay", lambda *args, **kwargs: types.SimpleNamespace(wake=None))
    monkeypatch.setattr(app, "placement_worker", service)
    assert Settings(kubeconfig="/dev/null").bind_concurrency == 64 == BIND_CONCURRENCY  # the binder's own default
    monkeypatch.setenv("GPUPLACE_BIND_CONCURRENCY", "8")
    with pytest.raises(Stop):
        asyncio.run(app.run(Settings(kubeconfig="/dev/null"), asyncio.Event()))
    assert seen["bind_concurrency"] == 8
    monkeypatch.setenv("GPUPLACE_BIND_CONCURRENCY", "0")
    with pytest.raises(ValueError, match="bind_concurrency"):
        Settings(kubeconfig="/dev/null")
