"""Configuration as one validated object, read once at start-up from `GPUPLACE_*` variables.

Secrets (the database password inside `GPUPLACE_DATABASE_URL`, `GPUPLACE_KAFKA_PASSWORD`) come only from the
environment or a Kubernetes Secret mounted into it, and never appear in `repr()` or logs: both are SecretStr.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Self

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

KafkaProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


@dataclass(frozen=True)
class KafkaAccess:
    """Where Kafka is and how to authenticate to it: what every Kafka client gpuplace opens is built from
    (adapters/kafka/connection.client_options). The password stays a SecretStr until the client is created."""

    bootstrap: str
    security_protocol: KafkaProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism = "SCRAM-SHA-512"
    username: str | None = None
    password: SecretStr | None = None
    ca_file: str | None = None  # verify the brokers against this CA (default: the system's)
    cert_file: str | None = None  # mutual TLS: this client's certificate and key
    key_file: str | None = None

    def as_settings(self) -> dict[str, Any]:
        """These settings as Settings' arguments, for a Settings of its own made with them (a bench's run)."""
        return {"kafka_bootstrap": self.bootstrap, "kafka_security_protocol": self.security_protocol,
                "kafka_sasl_mechanism": self.sasl_mechanism, "kafka_username": self.username,
                "kafka_password": self.password, "kafka_ca_file": self.ca_file, "kafka_cert_file": self.cert_file,
                "kafka_key_file": self.key_file}


class KafkaSettings(BaseSettings):
    """The GPUPLACE_KAFKA_* variables alone: what Settings reads about Kafka, and what a client given only a
    bootstrap list (a test, a bench's probe) authenticates with (adapters/kafka/connection: a bare bootstrap string)."""

    model_config = SettingsConfigDict(env_prefix="GPUPLACE_", extra="ignore")

    kafka_bootstrap: str = "127.0.0.1:29092"
    # Kafka TLS and SASL (KafkaAccess): SASL_SSL in production (`gpuplace up`, `gpuplace service` and the chart
    # default to it: cli/services.service_settings); the password only from the environment or a mounted Secret
    kafka_security_protocol: KafkaProtocol = "PLAINTEXT"
    kafka_sasl_mechanism: SaslMechanism = "SCRAM-SHA-512"
    kafka_username: str | None = None
    kafka_password: SecretStr | None = None
    kafka_ca_file: str | None = None
    kafka_cert_file: str | None = None
    kafka_key_file: str | None = None

    @model_validator(mode="after")
    def _kafka_security_complete(self) -> Self:
        protocol = self.kafka_security_protocol
        if protocol.startswith("SASL_") and not (self.kafka_username and self.kafka_password):
            raise ValueError(f"GPUPLACE_KAFKA_SECURITY_PROTOCOL={protocol} needs GPUPLACE_KAFKA_USERNAME and "
                             "GPUPLACE_KAFKA_PASSWORD")
        if bool(self.kafka_cert_file) != bool(self.kafka_key_file):
            raise ValueError("GPUPLACE_KAFKA_CERT_FILE and GPUPLACE_KAFKA_KEY_FILE go together (mutual TLS)")
        tls = self.kafka_ca_file or self.kafka_cert_file
        if tls and not protocol.endswith("SSL"):
            raise ValueError(f"Kafka TLS files are set but GPUPLACE_KAFKA_SECURITY_PROTOCOL={protocol} does not "
                             "use TLS (SSL or SASL_SSL)")
        return self

    @property
    def kafka(self) -> KafkaAccess:
        return KafkaAccess(self.kafka_bootstrap, self.kafka_security_protocol, self.kafka_sasl_mechanism,
                           self.kafka_username, self.kafka_password, self.kafka_ca_file, self.kafka_cert_file,
                           self.kafka_key_file)


class Settings(KafkaSettings):
    database_url: SecretStr = SecretStr("postgresql+asyncpg://gpuplace:gpuplace@127.0.0.1:25432/gpuplace")
    kubeconfig: str | None = Field(default=None, validation_alias=AliasChoices("GPUPLACE_KUBECONFIG", "KUBECONFIG"))
    # cluster name -> kubeconfig path, for a placement worker serving several clusters
    # (GPUPLACE_KUBECONFIGS='{"east": "/etc/gpuplace/east.kubeconfig", ...}'); defaults to {cluster: kubeconfig}.
    # NoDecode: the JSON is parsed by _kubeconfigs_json, which names the variable when it is not JSON
    kubeconfigs: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    # cluster-watcher scope: all nodes and namespaces unless narrowed (a node pool, a tenant's namespace)
    node_label_selector: str = ""
    namespace: str = ""
    cluster: str = Field(default="east", pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    region: str = "local"
    scheduler_name: str = "gpuplace"
    # DRA (resource.k8s.io/v1): GPUs from gpu.nvidia.com ResourceSlices, pods with ResourceClaims (adapters/kube/dra)
    dra_enabled: bool = True
    # GPU shares (memory slices, fractions) go only to nodes where something enforces them (HAMi, a DRA driver, a
    # node labelled gpuplace.io/gpu-sharing-enforcement); true also places them where nothing does, with a warning
    # Event on the pod (adapters/kube/enforcement.py). Read by cluster-watcher: one setting per cluster.
    allow_unenforced_sharing: bool = False
    policy: str = "gpuplace"
    # gpuplace's whole-GPU reserve (core/policies/gpuplace/whole_gpu_reserve.py): unset, the policy's default scale;
    # 0 turns it off (no shared pod is ever held back from a GPU it fits)
    whole_gpu_reserve: float | None = Field(default=None, ge=0.0)
    # GPU requests the operator expects before any is seen, so that the policy keeps room for them from the start
    # (a training job's 8 whole GPUs): "8xgpu,4xgpu@NVIDIA-H200,1x20480Mi" (usecases/decide.parse_expected_shapes);
    # they replace gpuplace's own guess of whole-GPU shapes of the same GPU counts (shape_estimate.prior_shapes)
    expected_shapes: str = ""
    # admission keeps every pod's predicted p95 <= deadline x (1 - margin) on its GPU
    latency_margin: float = Field(default=0.1, ge=0.0, lt=1.0)
    # binds in flight at once, over all the clusters of a placement worker (usecases/binder.BIND_CONCURRENCY, why
    # 64); kubernetes_asyncio keeps at most 100 connections per apiserver, so more than that only queues in the client
    bind_concurrency: int = Field(default=64, ge=1)
    # defragmentation: pods of at least this priority, blocked by fragmentation, may have others moved
    defrag_enabled: bool = True
    defrag_min_priority: int = 1
    # scale hints (gpuplace.hints.v1): for pods waiting this long, at most once per interval per cluster; node
    # shapes an autoscaler could add beside the cluster's own, "MODEL:COUNT:GPU_MEMORY_MIB:CPU_MILLI:MEMORY_MIB,..."
    scale_hints_enabled: bool = True
    scale_hint_min_wait_s: float = Field(default=30.0, ge=0)
    scale_hint_interval_s: float = Field(default=60.0, ge=0)
    scale_hint_shapes: str = ""
    consumer_group_prefix: str = "gpuplace"
    # static group membership (KIP-345): a worker restarted with the same id (its pod name: the container restarts
    # in the same pod) takes its partitions back at once, instead of leaving them unread until the dead member's
    # session times out and the group rebalances. Unique per worker; unset: dynamic membership.
    instance_id: str | None = Field(default=None, min_length=1, max_length=200)
    topic_suffix: str = ""  # lets tests share one broker without colliding
    # copies of each topic's partitions that gpuplace creates (`gpuplace up`, the chart's topic job): 1 suits one
    # broker; 3 a production cluster, where the broker's min.insync.replicas then decides what a send waits for
    topic_replication_factor: int = Field(default=1, ge=1, le=16)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    # text: one readable line per record; json: one JSON object per line, for a log pipeline (Loki, Elasticsearch)
    log_format: Literal["text", "json"] = "text"
    # the asyncio event loop a service process runs on: uvloop (libuv, in C) spends less CPU per socket read,
    # write and callback than asyncio's own loop, and a service is mostly those; `asyncio` is the fallback
    event_loop: Literal["uvloop", "asyncio"] = "uvloop"
    # cluster-watcher replicas of one cluster elect one publisher with a coordination.k8s.io/v1 Lease in the
    # watched cluster (adapters/kube/leader_election.py: client-go's semantics and durations). The namespace must
    # exist; the identity is instance_id, else hostname_pid.
    leader_election: bool = True
    leader_election_namespace: str = Field(default="gpuplace", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                                           max_length=63)
    leader_election_lease_duration_s: int = Field(default=15, ge=1)
    leader_election_renew_deadline_s: float = Field(default=10.0, gt=0)
    leader_election_retry_period_s: float = Field(default=2.0, gt=0)
    # poison input: a handler that raises (not a transient outage) is tried this often, then its record is
    # dead-lettered; an event over max_event_bytes is never sent (Kafka's default message limit is 1 MB)
    handler_attempts: int = Field(default=3, ge=1, le=100)
    # placement compares PostgreSQL with each apiserver on taking a cluster and this often (0: never), to
    # release pods deleted while nothing watched and charge pods bound unseen (usecases/reconcile)
    reconcile_interval_s: float = Field(default=300.0, ge=0)
    max_event_bytes: int = Field(default=900_000, ge=4096, le=100_000_000)
    # retention (usecases/retention.py, docs/retention.md): days each kind of row is kept, 0 for ever. Processed
    # event ids must outlive every record Kafka can redeliver: a record stays up to the topic's retention.ms plus
    # its segment.ms (7 + 7 days by Kafka's defaults), so 15 days. Published outbox rows are on Kafka already: a
    # day, to look at. Decisions (and deleted pods' rows) are what `gpuplace explain` tells: two weeks. Latency
    # windows feed the fleet report and offline study, the model keeps its own fit: a week. The placement
    # replica holding the pruning turn prunes every retention_interval_s (0: none does), batch_rows a transaction.
    retention_processed_events_days: float = Field(default=15.0, ge=0)
    retention_outbox_days: float = Field(default=1.0, ge=0)
    retention_decisions_days: float = Field(default=14.0, ge=0)
    retention_latency_windows_days: float = Field(default=7.0, ge=0)
    retention_interval_s: float = Field(default=300.0, ge=0)
    retention_batch_rows: int = Field(default=1000, ge=1, le=100_000)
    # gpu-agent: the node it reports for, and where it reads GPUs (NVML if no DCGM exporter URL is given)
    node_name: str | None = None
    dcgm_url: str | None = None
    telemetry_interval_s: float = Field(default=5.0, gt=0)
    # gpu-agent scrapes the frame latency histogram of the node's opted-in GPU pods every latency_window_s
    # (adapters/pod_metrics); 0 turns it off. It lists the node's pods with `kubeconfig`.
    latency_window_s: float = Field(default=10.0, ge=0)
    latency_metric: str = Field(default="gpuplace_frame_latency_seconds", pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
    # every service process serves /metrics (Prometheus), /healthz and /readyz on this port (0: any free port,
    # logged at start-up; what tests, the demo and the chaos bench use so that runs never collide)
    http_port: int = Field(default=8080, ge=0, le=65535)

    @field_validator("database_url")
    @classmethod
    def _asyncpg_url(cls, value: SecretStr) -> SecretStr:
        return SecretStr(asyncpg_url(value.get_secret_value()))

    @field_validator("kubeconfigs", mode="before")
    @classmethod
    def _kubeconfigs_json(cls, value: object) -> object:
        """pydantic-settings' own JSON decoding fails with 'error parsing value for field "kubeconfigs"' and a
        traceback; this says what the variable should hold."""
        if not isinstance(value, str):
            return value
        if not value.strip():
            return {}
        try:
            return json.loads(value)
        except ValueError as exc:
            raise ValueError(f"not JSON ({exc}); expected an object of cluster name -> kubeconfig path, "
                             '{"east": "/etc/gpuplace/east.kubeconfig"}') from None

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_in_capitals(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _election_timing_consistent(self) -> Settings:
        """client-go's rules: lease duration > renew deadline > 1.2 x retry period (its JitterFactor)."""
        lease, renew = self.leader_election_lease_duration_s, self.leader_election_renew_deadline_s
        retry = self.leader_election_retry_period_s
        if not lease > renew > 1.2 * retry:
            raise ValueError(f"GPUPLACE_LEADER_ELECTION_LEASE_DURATION_S ({lease}) must exceed "
                             f"GPUPLACE_LEADER_ELECTION_RENEW_DEADLINE_S ({renew}), which must exceed 1.2 x "
                             f"GPUPLACE_LEADER_ELECTION_RETRY_PERIOD_S ({retry})")
        return self

    def cluster_kubeconfigs(self) -> dict[str, str]:
        if self.kubeconfigs:
            return dict(self.kubeconfigs)
        return {self.cluster: self.kubeconfig} if self.kubeconfig else {}

    def topic(self, name: str) -> str:
        return f"{name}{self.topic_suffix}"


# The PostgreSQL URL forms providers hand out (RDS, Cloud SQL, Azure, Neon, CloudNativePG's app Secret), all meaning
# libpq; gpuplace connects with asyncpg, whose SQLAlchemy dialect is postgresql+asyncpg
_LIBPQ_SCHEMES = ("postgresql", "postgres", "postgresql+asyncpg")
_ASYNCPG_URL = "postgresql+asyncpg://USER:PASSWORD@HOST:5432/DATABASE"


def asyncpg_url(url: str) -> str:
    """`url` as SQLAlchemy's asyncpg dialect takes it: a plain postgresql:// or postgres:// URL gets the
    +asyncpg driver, and libpq's sslmode becomes asyncpg's ssl (same values: disable ... verify-full). A ValueError
    for anything else says what is wrong and never repeats the URL, which carries the password."""
    from sqlalchemy.engine import make_url  # imported here: `gpuplace --version` and the settings of
    from sqlalchemy.exc import ArgumentError  # gpu-agent should not pay for SQLAlchemy

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise ValueError(f"not a database URL; expected {_ASYNCPG_URL}") from None
    if parsed.drivername not in _LIBPQ_SCHEMES:
        raise ValueError(f"{parsed.drivername}:// is not a PostgreSQL URL gpuplace can use; expected "
                         f"{_ASYNCPG_URL} (postgresql:// and postgres:// are taken as that)")
    query = dict(parsed.query)
    if "channel_binding" in query:
        raise ValueError("channel_binding is a libpq parameter asyncpg does not take: remove it from the URL "
                         "(the password exchange is still SCRAM, and sslmode keeps the connection encrypted)")
    if "sslmode" in query:
        query.setdefault("ssl", query.pop("sslmode"))
    fixed = parsed.set(drivername="postgresql+asyncpg", query=query)
    return fixed.render_as_string(hide_password=False)


class ConfigurationError(RuntimeError):
    """A service cannot run as configured: a setting it needs is missing (the message names the variable), or
    what it reads disagrees with itself (topics of different partition counts). Not SystemExit: raised in a
    service's task, that would escape asyncio's task machinery with a traceback."""


def load() -> Settings:
    return Settings()


__all__ = ["ConfigurationError", "KafkaAccess", "KafkaSettings", "Settings", "asyncpg_url", "load"]
