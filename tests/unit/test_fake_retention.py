"""The in-memory pruning passes the same contract as PostgreSQL's (tests/contract/retention_contract.py)."""

from tests.contract.retention_contract import RetentionContract
from tests.fakes import FakeUnitOfWorkFactory


class TestFakeRetention(RetentionContract):
    def make_uow_factory(self) -> FakeUnitOfWorkFactory:
        return FakeUnitOfWorkFactory()

    async def latency_window_pods(self, uow_factory: FakeUnitOfWorkFactory) -> list[str]:
        return sorted(w["pod"] for w in uow_factory.db.latency)
