"""An event's content digest beside its claimed id: the same id with other content is refused, not skipped.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("processed_events", sa.Column("digest", sa.Text()))


def downgrade() -> None:
    op.drop_column("processed_events", "digest")
