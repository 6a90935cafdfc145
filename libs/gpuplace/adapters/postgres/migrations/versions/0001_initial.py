"""Initial fleet state: nodes, GPUs, pods, allocations, decisions, outbox, processed events, latency.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy import Text
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "decisions",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("cluster", sa.Text(), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("pod", sa.Text(), nullable=False),
        sa.Column("pod_uid", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("node", sa.Text(), nullable=True),
        sa.Column("gpus", postgresql.JSONB(astext_type=Text()), server_default="[]", nullable=False),
        sa.Column("policy", sa.Text(), nullable=True),
        sa.Column("reasons", postgresql.JSONB(astext_type=Text()), server_default="{}", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("decisions_by_pod", "decisions", ["cluster", "pod_uid"], unique=False)
    op.create_table(
        "latency_windows",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("cluster", sa.Text(), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("pod", sa.Text(), nullable=False),
        sa.Column("workload", sa.Text(), nullable=False),
        sa.Column("node", sa.Text(), nullable=True),
        sa.Column("gpu_index", sa.Integer(), nullable=True),
        sa.Column("window_end", sa.DateTime(timezone=True), nullable=False),
        sa.Column("window_s", sa.Float(), nullable=False),
        sa.Column("frames", sa.Integer(), nullable=False),
        sa.Column("p50_ms", sa.Float(), nullable=False),
        sa.Column("p95_ms", sa.Float(), nullable=False),
        sa.Column("p99_ms", sa.Float(), nullable=False),
        sa.Column("deadline_ms", sa.Float(), nullable=True),
        sa.Column("deadline_misses", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("latency_by_pod", "latency_windows", ["cluster", "namespace", "pod"], unique=False)
    op.create_index("latency_by_workload", "latency_windows", ["workload", "node", "gpu_index"], unique=False)
    op.create_table(
        "nodes",
        sa.Column("cluster", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("region", sa.Text(), nullable=False),
        sa.Column("cpu_milli", sa.BigInteger(), nullable=False),
        sa.Column("memory_mib", sa.BigInteger(), nullable=False),
        sa.Column("cpu_assigned_milli", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("memory_assigned_mib", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("gpu_model", sa.Text(), nullable=True),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("gpu_memory_mib", sa.Integer(), nullable=False),
        sa.Column("ready", sa.Boolean(), nullable=False),
        sa.Column("unschedulable", sa.Boolean(), nullable=False),
        sa.Column("labels", postgresql.JSONB(astext_type=Text()), server_default="{}", nullable=False),
        sa.Column("taints", postgresql.JSONB(astext_type=Text()), server_default="[]", nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("cluster", "name"),
    )
    op.create_table(
        "outbox",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("payload", postgresql.JSONB(astext_type=Text()), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "outbox_unpublished", "outbox", ["id"], unique=False, postgresql_where=sa.text("published_at IS NULL")
    )
    op.create_table(
        "pods",
        sa.Column("cluster", sa.Text(), nullable=False),
        sa.Column("uid", sa.Text(), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("priority", sa.Integer(), server_default="0", nullable=False),
        sa.Column("request", postgresql.JSONB(astext_type=Text()), nullable=True),
        sa.Column("cpu_milli", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("memory_mib", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("deadline_ms", sa.Float(), nullable=True),
        sa.Column("frame_rate_hz", sa.Float(), nullable=True),
        sa.Column("workload", sa.Text(), nullable=True),
        sa.Column("owner", sa.Text(), nullable=True),
        sa.Column("node", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("reserved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("bound_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "state IN ('pending','reserved','bound','unschedulable','invalid','deleted')", name="pod_state_known"
        ),
        sa.PrimaryKeyConstraint("cluster", "uid"),
    )
    op.create_index("pods_by_name", "pods", ["cluster", "namespace", "name"], unique=False)
    op.create_index("pods_waiting", "pods", ["cluster", "state"], unique=False)
    op.create_table(
        "processed_events",
        sa.Column("consumer", sa.Text(), nullable=False),
        sa.Column("event_id", sa.Text(), nullable=False),
        sa.Column("processed_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("consumer", "event_id"),
    )
    op.create_table(
        "gpus",
        sa.Column("cluster", sa.Text(), nullable=False),
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.Text(), nullable=True),
        sa.Column("model", sa.Text(), nullable=True),
        sa.Column("memory_total_mib", sa.Integer(), nullable=False),
        sa.Column("memory_assigned_mib", sa.Integer(), server_default="0", nullable=False),
        sa.Column("share_assigned_milli", sa.Integer(), server_default="0", nullable=False),
        sa.Column("memory_observed_mib", sa.Integer(), nullable=True),
        sa.Column("utilization_pct", sa.Float(), nullable=True),
        sa.Column("healthy", sa.Boolean(), server_default="true", nullable=False),
        sa.Column("telemetry_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "memory_assigned_mib >= 0 AND memory_assigned_mib <= memory_total_mib", name="gpu_memory_fits"
        ),
        sa.CheckConstraint("share_assigned_milli >= 0 AND share_assigned_milli <= 1000", name="gpu_share_fits"),
        sa.ForeignKeyConstraint(["cluster", "node"], ["nodes.cluster", "nodes.name"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("cluster", "node", "index"),
    )
    op.create_table(
        "allocations",
        sa.Column("cluster", sa.Text(), nullable=False),
        sa.Column("pod_uid", sa.Text(), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("memory_mib", sa.Integer(), nullable=False),
        sa.Column("share_milli", sa.Integer(), nullable=False),
        sa.Column("decision_id", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(
            ["cluster", "node", "gpu_index"], ["gpus.cluster", "gpus.node", "gpus.index"], ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["cluster", "pod_uid"], ["pods.cluster", "pods.uid"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("cluster", "pod_uid", "gpu_index"),
    )


def downgrade() -> None:
    op.drop_table("allocations")
    op.drop_table("gpus")
    op.drop_table("processed_events")
    op.drop_index("pods_waiting", table_name="pods")
    op.drop_index("pods_by_name", table_name="pods")
    op.drop_table("pods")
    op.drop_index("outbox_unpublished", table_name="outbox", postgresql_where=sa.text("published_at IS NULL"))
    op.drop_table("outbox")
    op.drop_table("nodes")
    op.drop_index("latency_by_workload", table_name="latency_windows")
    op.drop_index("latency_by_pod", table_name="latency_windows")
    op.drop_table("latency_windows")
    op.drop_index("decisions_by_pod", table_name="decisions")
    op.drop_table("decisions")
