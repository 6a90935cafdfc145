"""Retention (usecases/retention.py): indexes that let the pruner find the oldest rows of each kept table, and
`retention_marks`, where it records up to when each was pruned (what `gpuplace explain` says when a pod's story
is gone).

The indexes are on timestamps that only grow as rows are written (processed_at, created_at, window_end), so each
insert adds at the index's right edge: cheap on the placement path. Deleted pods get a partial index, written only
when a pod becomes deleted. The outbox is pruned in id order (its primary key), so it needs none.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-10
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("processed_events_by_age", "processed_events", ["processed_at"])
    op.create_index("decisions_by_age", "decisions", ["created_at"])
    op.create_index("latency_windows_by_age", "latency_windows", ["window_end"])
    op.create_index("pods_deleted_by_age", "pods", ["first_seen_at"], postgresql_where=sa.text("state = 'deleted'"))
    op.create_table(
        "retention_marks",
        sa.Column("name", sa.Text(), primary_key=True),
        sa.Column("pruned_before", sa.DateTime(timezone=True), nullable=False),
        sa.Column("rows_pruned", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("pruned_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )


def downgrade() -> None:
    op.drop_table("retention_marks")
    op.drop_index("pods_deleted_by_age", table_name="pods")
    op.drop_index("latency_windows_by_age", table_name="latency_windows")
    op.drop_index("decisions_by_age", table_name="decisions")
    op.drop_index("processed_events_by_age", table_name="processed_events")
