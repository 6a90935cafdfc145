"""The metrics every use case has unless wired to Prometheus pass the same contract as Prometheus's."""

from gpuplace.usecases.ports import NO_METRICS, Metrics
from tests.contract.metrics_contract import MetricsContract


class TestNullMetrics(MetricsContract):
    def make_metrics(self) -> Metrics:
        return NO_METRICS
