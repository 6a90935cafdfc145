"""The in-memory unit of work and its repositories pass the same contract slices as PostgreSQL's."""

from typing import Any

from gpuplace.usecases.repositories import UnitOfWorkFactory
from tests.contract.allocations_contract import AllocationsContract
from tests.contract.decisions_contract import DecisionsContract
from tests.contract.event_claims_contract import EventClaimsContract
from tests.contract.latency_contract import LatencyContract
from tests.contract.nodes_contract import NodesContract
from tests.contract.plans_contract import PlansContract
from tests.contract.pods_contract import PodsContract
from tests.contract.queued_outbox_contract import QueuedOutboxContract
from tests.contract.unit_of_work_contract import UnitOfWorkContract
from tests.fakes import FakeUnitOfWorkFactory


class FakeStore:
    """How a slice gets a fresh fake store (StoreContract)."""

    def make_uow_factory(self) -> UnitOfWorkFactory:
        return FakeUnitOfWorkFactory()

    async def latency_windows(self, uow_factory: FakeUnitOfWorkFactory) -> list[Any]:
        return list(uow_factory.db.latency)


class TestFakeUnitOfWork(FakeStore, UnitOfWorkContract):
    pass


class TestFakeEventClaims(FakeStore, EventClaimsContract):
    pass


class TestFakeNodes(FakeStore, NodesContract):
    pass


class TestFakePods(FakeStore, PodsContract):
    pass


class TestFakeAllocations(FakeStore, AllocationsContract):
    pass


class TestFakeDecisions(FakeStore, DecisionsContract):
    pass


class TestFakePlans(FakeStore, PlansContract):
    pass


class TestFakeQueuedOutbox(FakeStore, QueuedOutboxContract):
    pass


class TestFakeLatency(FakeStore, LatencyContract):
    pass
