"""The whole node counts: other schedulers' pods (`managed` false), each pod's node rules, node pod slots
and countables.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("nodes", sa.Column("max_pods", sa.Integer()))
    op.add_column("nodes", sa.Column("extended", JSONB, nullable=False, server_default="{}"))
    op.add_column("pods", sa.Column("managed", sa.Boolean(), nullable=False, server_default="true"))
    op.add_column("pods", sa.Column("rules", JSONB))


def downgrade() -> None:
    op.drop_column("pods", "rules")
    op.drop_column("pods", "managed")
    op.drop_column("nodes", "extended")
    op.drop_column("nodes", "max_pods")
