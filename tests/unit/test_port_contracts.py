"""Every port has a contract suite, run on its fake and on the real component, with a case for every method.

A port method no case covers (`@covers`, tests/contract/covers.py) fails here, as does a suite that one side
no longer runs: the contract is what keeps the fakes of the unit tests honest.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Protocol

import pytest

from gpuplace.usecases import ports
from tests.contract.cluster_api_contract import ClusterApiContract
from tests.contract.covers import covered, covers, port_methods
from tests.contract.metrics_contract import MetricsContract
from tests.contract.outbox_contract import OutboxContract
from tests.contract.retention_contract import RetentionContract
from tests.contract.unit_of_work_contract import UnitOfWorkContract

# suite -> (the ports it is the contract of, the modules that run it: on the fake, on the real component)
SUITES: dict[type, tuple[tuple[type, ...], tuple[str, str]]] = {
    UnitOfWorkContract: ((ports.StateRepository, ports.UnitOfWork),
                         ("tests.unit.test_fake_unit_of_work", "tests.integration.test_postgres_unit_of_work")),
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


def test_every_port_has_a_contract_suite() -> None:
    declared = {obj for obj in vars(ports).values()
                if inspect.isclass(obj) and obj is not Protocol and getattr(obj, "_is_protocol", False)}
    assert declared == {port for port_set, _ in SUITES.values() for port in port_set}


@pytest.mark.parametrize("suite", SUITES, ids=lambda suite: suite.__name__)
def test_every_port_method_has_a_contract_case(suite: type) -> None:
    port_set, _ = SUITES[suite]
    methods = set().union(*(port_methods(port) for port in port_set))
    cases = covered(suite)
    assert sorted(methods - set(cases)) == [], f"port methods {suite.__name__} has no case for"
    assert sorted(set(cases) - methods) == [], "cases cover methods no port declares (a typo, or a method gone)"


@pytest.mark.parametrize("suite", SUITES, ids=lambda suite: suite.__name__)
def test_every_suite_runs_on_the_fake_and_on_the_real_component(suite: type) -> None:
    for module_name in SUITES[suite][1]:
        module = importlib.import_module(module_name)
        runs = [obj for name, obj in vars(module).items()
                if name.startswith("Test") and inspect.isclass(obj) and issubclass(obj, suite)]
        assert runs, f"{module_name} runs no {suite.__name__}"


def test_a_method_without_a_case_is_found() -> None:
    class Port(Protocol):
        async def kept(self) -> None: ...
        async def forgotten(self) -> None: ...

    class Suite:
        @covers("kept")
        async def test_kept(self) -> None: ...

    assert port_methods(Port) - set(covered(Suite)) == {"forgotten"}
