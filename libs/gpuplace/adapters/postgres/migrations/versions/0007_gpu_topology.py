"""GPU topology: each GPU's NUMA node and NVLink domain, from the node's labels (NULL: not described).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("gpus", sa.Column("numa_node", sa.Integer()))
    op.add_column("gpus", sa.Column("nvlink_domain", sa.Integer()))


def downgrade() -> None:
    op.drop_column("gpus", "nvlink_domain")
    op.drop_column("gpus", "numa_node")
