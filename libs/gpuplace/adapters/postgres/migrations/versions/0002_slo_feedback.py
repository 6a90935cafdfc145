"""SLO feedback: GPUs closed to new pods after a deadline miss; pods marked for a move.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("gpus", sa.Column("slo_blocked_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("pods", sa.Column("move_requested_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("pods", "move_requested_at")
    op.drop_column("gpus", "slo_blocked_at")
