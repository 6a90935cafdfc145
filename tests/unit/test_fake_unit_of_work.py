"""The in-memory unit of work passes the same contract as PostgreSQL's."""

from tests.contract.unit_of_work_contract import UnitOfWorkContract
from tests.fakes import FakeUnitOfWorkFactory


class TestFakeUnitOfWork(UnitOfWorkContract):
    def make_uow_factory(self) -> FakeUnitOfWorkFactory:
        return FakeUnitOfWorkFactory()
