"""PostgreSQL state of the fleet (DESIGN §5), as SQLAlchemy Core tables; migrations mirror this module.

The database, not any process's memory, is the truth about capacity: `gpus` carries CHECK constraints so
that even a buggy writer cannot over-commit a GPU, and `allocations` has one row per (pod, GPU) so a pod
cannot hold a GPU twice. `processed_events` makes every consumer idempotent by `event_id`; `outbox` holds
events that become visible on Kafka only after the transaction that produced them commits.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Float,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    func,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

metadata = MetaData()

nodes = Table(
    "nodes", metadata,
    Column("cluster", Text, primary_key=True),
    Column("name", Text, primary_key=True),
    Column("region", Text, nullable=False),
    Column("cpu_milli", BigInteger, nullable=False),
    Column("memory_mib", BigInteger, nullable=False),
    Column("cpu_assigned_milli", BigInteger, nullable=False, server_default="0"),
    Column("memory_assigned_mib", BigInteger, nullable=False, server_default="0"),
    Column("gpu_model", Text),
    Column("gpu_count", Integer, nullable=False),
    Column("gpu_memory_mib", Integer, nullable=False),
    Column("ready", Boolean, nullable=False),
    Column("unschedulable", Boolean, nullable=False),
    Column("labels", JSONB, nullable=False, server_default="{}"),
    Column("taints", JSONB, nullable=False, server_default="[]"),
    Column("max_pods", Integer),  # allocatable pods; NULL: not reported
    # allocatable countables by name: MIG profiles and the NodeEvent's other resources (ephemeral-storage, ...)
    Column("extended", JSONB, nullable=False, server_default="{}"),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # The node left the cluster (deleted) while pods still held resources there: kept, with their GPUs and
    # allocations, so a node that registers again under its name is charged with them; NULL: present.
    Column("absent_since", DateTime(timezone=True)),
)

gpus = Table(
    "gpus", metadata,
    Column("cluster", Text, primary_key=True),
    Column("node", Text, primary_key=True),
    Column("index", Integer, primary_key=True),
    Column("uuid", Text),
    Column("model", Text),
    # what placement may fill: the memory the node reports, or, when it reports less than pods hold here (a GPU
    # that shrank, a wrong report corrected), what they hold, so nothing new fits until they go
    Column("memory_total_mib", Integer, nullable=False),
    Column("memory_assigned_mib", Integer, nullable=False, server_default="0"),
    Column("share_assigned_milli", Integer, nullable=False, server_default="0"),
    Column("memory_reported_mib", Integer),  # what the node reports now; NULL: memory_total_mib (rows before 0009)
    Column("memory_observed_mib", Integer),
    Column("utilization_pct", Float),
    Column("healthy", Boolean, nullable=False, server_default="true"),
    Column("telemetry_at", DateTime(timezone=True)),
    # Set when a pod on this GPU missed its deadline (observed p95): no new pod goes here until cleared.
    Column("slo_blocked_at", DateTime(timezone=True)),
    # Topology (the node's labels, adapters/kube/topology_labels.py): NULL where the node does not describe it.
    Column("numa_node", Integer),
    Column("nvlink_domain", Integer),
    ForeignKeyConstraint(["cluster", "node"], ["nodes.cluster", "nodes.name"], ondelete="CASCADE"),
    CheckConstraint("memory_assigned_mib >= 0 AND memory_assigned_mib <= memory_total_mib", name="gpu_memory_fits"),
    CheckConstraint("share_assigned_milli >= 0 AND share_assigned_milli <= 1000", name="gpu_share_fits"),
)

pods = Table(
    "pods", metadata,
    Column("cluster", Text, primary_key=True),
    Column("uid", Text, primary_key=True),
    Column("namespace", Text, nullable=False),
    Column("name", Text, nullable=False),
    # pending | reserved | bound | unschedulable | invalid | deleted, and `promised`: a place held for the
    # replacement of a pod the defragmenter evicts (owner = the evicted pod's owner, adopted by its successor)
    Column("state", Text, nullable=False),
    Column("priority", Integer, nullable=False, server_default="0"),
    Column("request", JSONB),
    Column("cpu_milli", BigInteger, nullable=False, server_default="0"),
    Column("memory_mib", BigInteger, nullable=False, server_default="0"),
    Column("deadline_ms", Float),
    Column("frame_rate_hz", Float),
    Column("workload", Text),
    Column("service_ms", Float),
    Column("owner", Text),
    Column("node", Text),
    Column("reason", Text),
    Column("first_seen_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("reserved_at", DateTime(timezone=True)),
    Column("bound_at", DateTime(timezone=True)),
    Column("move_requested_at", DateTime(timezone=True)),  # SLO violation: the defragmenter should move it
    # False: another scheduler's pod, charged against its node but never placed, moved or bound by gpuplace
    Column("managed", Boolean, nullable=False, server_default="true"),
    Column("rules", JSONB),  # node selector, affinity, tolerations, host ports, countables (PodEvent fields)
    CheckConstraint(
        "state IN ('pending','reserved','bound','unschedulable','invalid','deleted','promised')",
        name="pod_state_known",
    ),
)
Index("pods_by_name", pods.c.cluster, pods.c.namespace, pods.c.name)
Index("pods_waiting", pods.c.cluster, pods.c.state)
Index("pods_promised", pods.c.cluster, pods.c.namespace, pods.c.owner, postgresql_where=pods.c.state == "promised")
Index("pods_deleted_by_age", pods.c.first_seen_at, postgresql_where=pods.c.state == "deleted")

allocations = Table(
    "allocations", metadata,
    Column("cluster", Text, primary_key=True),
    Column("pod_uid", Text, primary_key=True),
    Column("gpu_index", Integer, primary_key=True),
    Column("node", Text, nullable=False),
    Column("memory_mib", Integer, nullable=False),
    Column("share_milli", Integer, nullable=False),
    Column("decision_id", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    ForeignKeyConstraint(["cluster", "pod_uid"], ["pods.cluster", "pods.uid"], ondelete="CASCADE"),
    ForeignKeyConstraint(["cluster", "node", "gpu_index"], ["gpus.cluster", "gpus.node", "gpus.index"],
                         ondelete="CASCADE"),
)

decisions = Table(
    "decisions", metadata,
    Column("id", Text, primary_key=True),
    Column("cluster", Text, nullable=False),
    Column("namespace", Text, nullable=False),
    Column("pod", Text, nullable=False),
    Column("pod_uid", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("node", Text),
    Column("gpus", JSONB, nullable=False, server_default="[]"),
    Column("policy", Text),
    Column("reasons", JSONB, nullable=False, server_default="{}"),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)
Index("decisions_by_pod", decisions.c.cluster, decisions.c.pod_uid)
Index("decisions_by_age", decisions.c.created_at)  # the pruner's (usecases/retention.py), as the three below

# A defragmentation plan (usecases/defrag.py) and the pods it moves, in move order. The plan's row is what
# settles it exactly once (planned -> completed | aborted) and what recover() reads after a restart; its
# `defrag_planned` / `defrag_completed` / `defrag_aborted` decisions are the story people read.
defrag_plans = Table(
    "defrag_plans", metadata,
    Column("cluster", Text, primary_key=True),
    Column("plan_id", Text, primary_key=True),
    Column("beneficiary_uid", Text, nullable=False),
    Column("state", Text, nullable=False, server_default="planned"),
    Column("reason", Text),
    Column("planned_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("settled_at", DateTime(timezone=True)),
    CheckConstraint("state IN ('planned','completed','aborted')", name="defrag_plan_state"),
)
Index("defrag_plans_open", defrag_plans.c.cluster, postgresql_where=defrag_plans.c.state == "planned")

defrag_moves = Table(
    "defrag_moves", metadata,
    Column("cluster", Text, primary_key=True),
    Column("plan_id", Text, primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("uid", Text, nullable=False),
    Column("namespace", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("from_node", Text, nullable=False),
    Column("from_gpu_indices", ARRAY(Integer), nullable=False),
    Column("share_milli", Integer, nullable=False),
    Column("memory_mib", BigInteger, nullable=False),
    Column("cpu_milli", BigInteger, nullable=False),
    Column("pod_memory_mib", BigInteger, nullable=False),
    Column("promise", Text, nullable=False),
    ForeignKeyConstraint(["cluster", "plan_id"], ["defrag_plans.cluster", "defrag_plans.plan_id"],
                         ondelete="CASCADE"),
)
Index("defrag_moves_by_pod", defrag_moves.c.cluster, defrag_moves.c.uid)

outbox = Table(
    "outbox", metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("topic", Text, nullable=False),
    Column("key", Text, nullable=False),
    Column("payload", JSONB, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("published_at", DateTime(timezone=True)),
)
Index("outbox_unpublished", outbox.c.id, postgresql_where=outbox.c.published_at.is_(None))

processed_events = Table(
    "processed_events", metadata,
    Column("consumer", Text, primary_key=True),
    Column("event_id", Text, primary_key=True),
    Column("processed_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("digest", Text),  # Envelope.digest of what was processed: a reused id with other content is refused
)
Index("processed_events_by_age", processed_events.c.processed_at)

latency_windows = Table(
    "latency_windows", metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("cluster", Text, nullable=False),
    Column("namespace", Text, nullable=False),
    Column("pod", Text, nullable=False),
    Column("workload", Text, nullable=False),
    Column("node", Text),
    Column("gpu_index", Integer),
    Column("window_end", DateTime(timezone=True), nullable=False),
    Column("window_s", Float, nullable=False),
    Column("frames", Integer, nullable=False),
    Column("p50_ms", Float, nullable=False),
    Column("p95_ms", Float, nullable=False),
    Column("p99_ms", Float, nullable=False),
    Column("deadline_ms", Float),
    Column("deadline_misses", Integer, nullable=False),
)
Index("latency_by_pod", latency_windows.c.cluster, latency_windows.c.namespace, latency_windows.c.pod)
Index("latency_by_workload", latency_windows.c.workload, latency_windows.c.node, latency_windows.c.gpu_index)
Index("latency_windows_by_age", latency_windows.c.window_end)

latency_models = Table(
    "latency_models", metadata,
    Column("name", Text, primary_key=True),  # one fleet-wide model today ("fleet"); per-region later
    Column("state", JSONB, nullable=False),  # core.latency.model.as_dict()
    Column("windows", BigInteger, nullable=False, server_default="0"),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

# Up to when each kind of row was pruned (usecases/retention.py): rows older than `pruned_before` may be gone.
retention_marks = Table(
    "retention_marks", metadata,
    Column("name", Text, primary_key=True),  # a ports.Retained value
    Column("pruned_before", DateTime(timezone=True), nullable=False),
    Column("rows_pruned", BigInteger, nullable=False, server_default="0"),  # since the table was created
    Column("pruned_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

__all__ = ["metadata", "nodes", "gpus", "pods", "allocations", "decisions", "defrag_plans", "defrag_moves", "outbox",
           "processed_events", "latency_windows", "latency_models", "retention_marks"]
