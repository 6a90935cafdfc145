"""A node that left the cluster while pods still hold resources on it stays, absent, until they go.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("nodes", sa.Column("absent_since", sa.DateTime(timezone=True)))


def downgrade() -> None:
    op.execute("DELETE FROM nodes WHERE absent_since IS NOT NULL")
    op.drop_column("nodes", "absent_since")
