"""The placement service refuses a bad policy setting at start-up, before it connects to anything."""

import asyncio

import pytest

from gpuplace.settings import ConfigurationError, Settings
from services.placement import app


def test_a_bad_expected_shape_stops_placement_before_it_connects(monkeypatch):
    def connect(*args, **kwargs):
        raise AssertionError("connected despite the bad setting")

    monkeypatch.setattr(app, "resources", connect)
    settings = Settings(kubeconfig="/dev/null", expected_shapes="8xgpu,8xGPU")
    with pytest.raises(ConfigurationError, match=r"GPUPLACE_EXPECTED_SHAPES: expected shape '8xGPU'"):
        asyncio.run(app.run(settings, asyncio.Event()))
