"""Configuration as one validated object, read once at start-up from `GPUPLACE_*` variables.

Secrets (the database password inside `GPUPLACE_DATABASE_URL`) come only from the environment or a
Kubernetes Secret mounted into it, and never appear in `repr()` or logs: `database_url` is a SecretStr.
"""

from __future__ import annotations

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUPLACE_", extra="ignore")

    kafka_bootstrap: str = "127.0.0.1:29092"
    database_url: SecretStr = SecretStr("postgresql+asyncpg://gpuplace:gpuplace@127.0.0.1:25432/gpuplace")
    kubeconfig: str | None = Field(default=None, validation_alias=AliasChoices("GPUPLACE_KUBECONFIG", "KUBECONFIG"))
    # cluster name -> kubeconfig path, for a placement worker serving several clusters
    # (GPUPLACE_KUBECONFIGS='{"east": "/etc/gpuplace/east.kubeconfig", ...}'); defaults to {cluster: kubeconfig}.
    kubeconfigs: dict[str, str] = Field(default_factory=dict)
    # cluster-watcher scope: all nodes and namespaces unless narrowed (a node pool, a tenant's namespace)
    node_label_selector: str = ""
    namespace: str = ""
    cluster: str = Field(default="east", pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    region: str = "local"
    scheduler_name: str = "gpuplace"
    policy: str = "gpuplace"
    # admission keeps every pod's predicted p95 <= deadline x (1 - margin) on its GPU
    latency_margin: float = Field(default=0.1, ge=0.0, lt=1.0)
    # defragmentation: pods of at least this priority, blocked by fragmentation, may have others moved
    defrag_enabled: bool = True
    defrag_min_priority: int = 1
    consumer_group_prefix: str = "gpuplace"
    # static group membership (KIP-345): a worker restarted with the same id (its pod name: the container restarts
    # in the same pod) takes its partitions back at once, instead of leaving them unread until the dead member's
    # session times out and the group rebalances. Unique per worker; unset: dynamic membership.
    instance_id: str | None = Field(default=None, min_length=1, max_length=200)
    topic_suffix: str = ""  # lets tests share one broker without colliding
    log_level: str = "INFO"
    # poison input: a handler that raises (not a transient outage) is tried this often, then its record is
    # dead-lettered; an event over max_event_bytes is never sent (Kafka's default message limit is 1 MB)
    handler_attempts: int = Field(default=3, ge=1, le=100)
    # placement compares PostgreSQL with each apiserver on taking a cluster and this often (0: never), to
    # release pods deleted while nothing watched and charge pods bound unseen (usecases/reconcile)
    reconcile_interval_s: float = Field(default=300.0, ge=0)
    max_event_bytes: int = Field(default=900_000, ge=4096, le=100_000_000)
    # gpu-agent: the node it reports for, and where it reads GPUs (NVML if no DCGM exporter URL is given)
    node_name: str | None = None
    dcgm_url: str | None = None
    telemetry_interval_s: float = Field(default=5.0, gt=0)

    def cluster_kubeconfigs(self) -> dict[str, str]:
        if self.kubeconfigs:
            return dict(self.kubeconfigs)
        return {self.cluster: self.kubeconfig} if self.kubeconfig else {}

    def topic(self, name: str) -> str:
        return f"{name}{self.topic_suffix}"


def load() -> Settings:
    return Settings()


__all__ = ["Settings", "load"]
