"""Every port has a contract suite, run on its fake and on the real component, with a case for every method.

A port method no case covers (`@covers`, tests/contract/covers.py) fails here, as does a suite that one side
no longer runs: the contract is what keeps the fakes of the unit tests honest.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Protocol

import pytest

from gpuplace.usecases import ports, repositories
from tests.contract.allocations_contract import AllocationsContract
from tests.contract.cluster_api_contract import ClusterApiContract
from tests.contract.covers import covered, covers, port_methods
from tests.contract.decisions_contract import DecisionsContract
from tests.contract.event_claims_contract import EventClaimsContract
from tests.contract.latency_contract import LatencyContract
from tests.contract.metrics_contract import MetricsContract
from tests.contract.nodes_contract import NodesContract
from tests.contract.outbox_contract import OutboxContract
from tests.contract.plans_contract import PlansContract
from tests.contract.pods_contract import PodsContract
from tests.contract.queued_outbox_contract import QueuedOutboxContract
from tests.contract.retention_contract import RetentionContract
from tests.contract.unit_of_work_contract import UnitOfWorkContract

# The unit of work's contract comes in slices, one per repository and one for the unit of work itself; a case may
# check several repositories at once (a reservation moves pods too), so the slices cover these ports together.
STORE_SLICES = (UnitOfWorkContract, EventClaimsContract, NodesContract, PodsContract, AllocationsContract,
                DecisionsContract, PlansContract, QueuedOutboxContract, LatencyContract)
STORE_PORTS = (repositories.UnitOfWork, repositories.EventClaims, repositories.Nodes, repositories.Pods,
               repositories.Allocations, repositories.Decisions, repositories.Plans, repositories.Outbox,
               repositories.Latency)
STORE_RUNS = ("tests.unit.test_fake_unit_of_work", "tests.integration.test_postgres_unit_of_work")

# suite (or slices) -> (the ports it is the contract of, the modules that run it: on the fake, on the real component)
SUITES: dict[type | tuple[type, ...], tuple[tuple[type, ...], tuple[str, str]]] = {
    STORE_SLICES: (STORE_PORTS, STORE_RUNS),
    OutboxContract: ((ports.OutboxStore, ports.OutboxUnitOfWork),
                     ("tests.unit.test_fake_outbox", "tests.integration.test_postgres_outbox")),
    RetentionContract: ((ports.RetentionStore,),
                        ("tests.unit.test_fake_retention", "tests.integration.test_postgres_retention")),
    ClusterApiContract: ((ports.ClusterApi, ports.PodReader),
                         ("tests.unit.test_fake_cluster_api", "tests.integration.test_kube_cluster_api")),
    # Prometheus's client is in-process: its side runs in the unit tests, beside the counters' own checks
    MetricsContract: ((ports.Metrics,),
                      ("tests.unit.test_null_metrics", "tests.unit.adapters.test_prometheus_metrics")),
}


def _name(suite: type | tuple[type, ...]) -> str:
    return suite.__name__ if isinstance(suite, type) else "+".join(s.__name__ for s in suite)


def _cases(suite: type | tuple[type, ...]) -> dict[str, set[str]]:
    """Port method -> the cases that cover it, over all of the suite's slices."""
    found: dict[str, set[str]] = {}
    for one in (suite,) if isinstance(suite, type) else suite:
        for method, cases in covered(one).items():
            found.setdefault(method, set()).update(f"{one.__name__}.{case}" for case in cases)
    return found


def test_every_port_has_a_contract_suite() -> None:
    declared = {obj for module in (ports, repositories) for obj in vars(module).values()
                if inspect.isclass(obj) and obj is not Protocol and getattr(obj, "_is_protocol", False)}
    assert declared == {port for port_set, _ in SUITES.values() for port in port_set}


@pytest.mark.parametrize("suite", SUITES, ids=_name)
def test_every_port_method_has_a_contract_case(suite: type | tuple[type, ...]) -> None:
    port_set, _ = SUITES[suite]
    methods = set().union(*(port_methods(port) for port in port_set))
    cases = _cases(suite)
    assert sorted(methods - set(cases)) == [], f"port methods {_name(suite)} has no case for"
    assert sorted(set(cases) - methods) == [], "cases cover methods no port declares (a typo, or a method gone)"


@pytest.mark.parametrize("suite", SUITES, ids=_name)
def test_every_suite_runs_on_the_fake_and_on_the_real_component(suite: type | tuple[type, ...]) -> None:
    for module_name in SUITES[suite][1]:
        module = importlib.import_module(module_name)
        for one in (suite,) if isinstance(suite, type) else suite:
            runs = [obj for name, obj in vars(module).items()
                    if name.startswith("Test") and inspect.isclass(obj) and issubclass(obj, one)]
            assert runs, f"{module_name} runs no {one.__name__}"


def test_a_method_without_a_case_is_found() -> None:
    class Port(Protocol):
        async def kept(self) -> None: ...
        async def forgotten(self) -> None: ...

    class Suite:
        @covers("kept")
        async def test_kept(self) -> None: ...

    assert port_methods(Port) - set(covered(Suite)) == {"forgotten"}
