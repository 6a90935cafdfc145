"""Initial fleet state: nodes, GPUs, pods, allocations, decisions, outbox, processed events, latency.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from alembic import op

from gpuplace.adapters.postgres.tables import metadata

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# Frozen at this revision: later schema changes get their own revisions with explicit operations.
_TABLES = ("nodes", "gpus", "pods", "allocations", "decisions", "outbox", "processed_events", "latency_windows")


def upgrade() -> None:
    bind = op.get_bind()
    for name in _TABLES:
        metadata.tables[name].create(bind)


def downgrade() -> None:
    bind = op.get_bind()
    for name in reversed(_TABLES):
        metadata.tables[name].drop(bind)
