"""Defragmentation: a `promised` pod state holds a place for the replacement of an evicted pod.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_OLD = "state IN ('pending','reserved','bound','unschedulable','invalid','deleted')"
_NEW = "state IN ('pending','reserved','bound','unschedulable','invalid','deleted','promised')"


def upgrade() -> None:
    op.drop_constraint("pod_state_known", "pods", type_="check")
    op.create_check_constraint("pod_state_known", "pods", _NEW)
    op.create_index("pods_promised", "pods", ["cluster", "namespace", "owner"],
                    postgresql_where="state = 'promised'")


def downgrade() -> None:
    op.execute("DELETE FROM pods WHERE state = 'promised'")
    op.drop_index("pods_promised", table_name="pods")
    op.drop_constraint("pod_state_known", "pods", type_="check")
    op.create_check_constraint("pod_state_known", "pods", _OLD)
