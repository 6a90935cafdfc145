"""The in-memory outbox passes the same contract as PostgreSQL's."""

from collections.abc import Callable

from gpuplace.usecases.ports import OutboxUnitOfWork
from tests.contract.outbox_contract import OutboxContract
from tests.fakes import FakeUnitOfWorkFactory


class TestFakeOutbox(OutboxContract):
    def make_uow_factory(self) -> Callable[[], OutboxUnitOfWork]:
        return FakeUnitOfWorkFactory()
