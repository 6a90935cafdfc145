"""The in-memory unit of work passes the same contract as PostgreSQL's."""

from typing import Any

from gpuplace.usecases.ports import UnitOfWorkFactory
from tests.contract.unit_of_work_contract import UnitOfWorkContract
from tests.fakes import FakeUnitOfWorkFactory


class TestFakeUnitOfWork(UnitOfWorkContract):
    def make_uow_factory(self) -> UnitOfWorkFactory:
        return FakeUnitOfWorkFactory()

    async def latency_windows(self, uow_factory: FakeUnitOfWorkFactory) -> list[Any]:
        return list(uow_factory.db.latency)
