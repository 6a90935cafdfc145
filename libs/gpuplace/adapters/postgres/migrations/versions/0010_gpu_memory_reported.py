"""A GPU that reports less memory than pods hold keeps what they hold until they go (gpus.memory_reported_mib).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("gpus", sa.Column("memory_reported_mib", sa.Integer()))


def downgrade() -> None:
    op.execute("UPDATE gpus SET memory_total_mib = memory_reported_mib "
               "WHERE memory_reported_mib IS NOT NULL AND memory_reported_mib >= memory_assigned_mib")
    op.drop_column("gpus", "memory_reported_mib")
