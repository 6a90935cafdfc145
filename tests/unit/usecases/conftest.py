"""The in-memory ports the use-case tests share: a fresh fake database and a fake cluster API per test."""

from __future__ import annotations

import pytest

from tests.fakes import FakeClusterApi, FakeUnitOfWorkFactory


@pytest.fixture
def uow_factory() -> FakeUnitOfWorkFactory:
    return FakeUnitOfWorkFactory()


@pytest.fixture
def api() -> FakeClusterApi:
    return FakeClusterApi()
