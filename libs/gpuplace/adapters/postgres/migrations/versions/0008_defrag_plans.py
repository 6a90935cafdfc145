"""Defragmentation plans in their own tables: defrag_plans (settled once) and defrag_moves (the pods moved).

Until now a plan lived as JSON in its `defrag_planned` decision's reasons. The upgrade copies every plan still
open there (the pod's latest plan decision is `defrag_planned`) into the tables, so that a placement process
started on the new schema settles it as before; one whose JSON is unreadable is copied without moves, which
recover() aborts (who to give GPUs back to is unknown).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04
"""

import json

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_OPEN_PLANS = sa.text("""
    SELECT cluster, pod_uid, reasons, created_at FROM (
        SELECT DISTINCT ON (cluster, pod_uid) cluster, pod_uid, kind, reasons, created_at FROM decisions
        WHERE kind IN ('defrag_planned', 'defrag_completed', 'defrag_aborted')
        ORDER BY cluster, pod_uid, created_at DESC, id DESC) AS latest
    WHERE kind = 'defrag_planned'""")
_MOVE_COLUMNS = ("uid", "namespace", "name", "from_node", "from_gpu_indices", "share_milli", "memory_mib",
                 "cpu_milli", "pod_memory_mib", "promise")


def upgrade() -> None:
    plans = op.create_table(
        "defrag_plans",
        sa.Column("cluster", sa.Text(), primary_key=True),
        sa.Column("plan_id", sa.Text(), primary_key=True),
        sa.Column("beneficiary_uid", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False, server_default="planned"),
        sa.Column("reason", sa.Text()),
        sa.Column("planned_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("settled_at", sa.DateTime(timezone=True)),
        sa.CheckConstraint("state IN ('planned','completed','aborted')", name="defrag_plan_state"),
    )
    op.create_index("defrag_plans_open", "defrag_plans", ["cluster"], postgresql_where="state = 'planned'")
    moves = op.create_table(
        "defrag_moves",
        sa.Column("cluster", sa.Text(), primary_key=True),
        sa.Column("plan_id", sa.Text(), primary_key=True),
        sa.Column("seq", sa.Integer(), primary_key=True),
        sa.Column("uid", sa.Text(), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("from_node", sa.Text(), nullable=False),
        sa.Column("from_gpu_indices", ARRAY(sa.Integer()), nullable=False),
        sa.Column("share_milli", sa.Integer(), nullable=False),
        sa.Column("memory_mib", sa.BigInteger(), nullable=False),
        sa.Column("cpu_milli", sa.BigInteger(), nullable=False),
        sa.Column("pod_memory_mib", sa.BigInteger(), nullable=False),
        sa.Column("promise", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["cluster", "plan_id"], ["defrag_plans.cluster", "defrag_plans.plan_id"],
                                ondelete="CASCADE"),
    )
    op.create_index("defrag_moves_by_pod", "defrag_moves", ["cluster", "uid"])
    for cluster, uid, reasons, planned_at in op.get_bind().execute(_OPEN_PLANS).all():
        try:
            record = json.loads((reasons or {})["plan"])
            plan_id, victims = str(record["plan_id"]), [{k: v[k] for k in _MOVE_COLUMNS} for v in record["victims"]]
        except (KeyError, TypeError, ValueError):
            plan_id, victims = f"unrecorded-{uid}", []
        op.bulk_insert(plans, [{"cluster": cluster, "plan_id": plan_id, "beneficiary_uid": uid,
                                "planned_at": planned_at}])
        if victims:
            op.bulk_insert(moves, [{"cluster": cluster, "plan_id": plan_id, "seq": i, **v}
                                   for i, v in enumerate(victims)])


def downgrade() -> None:
    op.drop_index("defrag_moves_by_pod", table_name="defrag_moves")
    op.drop_table("defrag_moves")
    op.drop_index("defrag_plans_open", table_name="defrag_plans")
    op.drop_table("defrag_plans")
