"""Defragmentation plans in their own tables: defrag_plans (settled once) and defrag_moves (the pods moved).

Until now a plan lived as JSON in its `defrag_planned` decision's reasons. The upgrade copies every plan recorded
there into the tables, settled as the pod's next `defrag_completed` / `defrag_aborted` says (`gpuplace explain`
reads a moved pod's old GPUs and its replacement from them), so that a placement process started on the new
schema settles the open ones as before. An open plan whose JSON is unreadable is copied without moves, which
recover() aborts (whom to give GPUs back is unknown); a settled one is left out.

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

_PLAN_DECISIONS = sa.text("""
    SELECT cluster, pod_uid, kind, reasons, created_at FROM decisions
    WHERE kind IN ('defrag_planned', 'defrag_completed', 'defrag_aborted')
    ORDER BY cluster, pod_uid, created_at, id""")
_SETTLED = {"defrag_completed": "completed", "defrag_aborted": "aborted"}
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
    recorded: list[dict[str, object]] = []
    moved: list[dict[str, object]] = []
    open_plan: dict[tuple[str, str], dict[str, object]] = {}  # (cluster, pod) -> its plan not settled yet
    for cluster, uid, kind, reasons, at in op.get_bind().execute(_PLAN_DECISIONS).all():
        if kind != "defrag_planned":
            plan = open_plan.pop((cluster, uid), None)
            if plan is not None:
                plan.update(state=_SETTLED[kind], reason=(reasons or {}).get("reason"), settled_at=at)
            continue
        try:
            record = json.loads((reasons or {})["plan"])
            plan_id, victims = str(record["plan_id"]), [{k: v[k] for k in _MOVE_COLUMNS} for v in record["victims"]]
        except (KeyError, TypeError, ValueError):
            plan_id, victims = f"unrecorded-{uid}", []
        plan = {"cluster": cluster, "plan_id": plan_id, "beneficiary_uid": uid, "state": "planned", "reason": None,
                "planned_at": at, "settled_at": None}
        open_plan[(cluster, uid)] = plan
        recorded.append(plan)
        moved += [{"cluster": cluster, "plan_id": plan_id, "seq": i, **v} for i, v in enumerate(victims)]
    kept = [p for p in recorded if p["state"] == "planned" or not str(p["plan_id"]).startswith("unrecorded-")]
    if kept:
        op.bulk_insert(plans, kept)
    if moved:
        op.bulk_insert(moves, moved)


def downgrade() -> None:
    op.drop_index("defrag_moves_by_pod", table_name="defrag_moves")
    op.drop_table("defrag_moves")
    op.drop_index("defrag_plans_open", table_name="defrag_plans")
    op.drop_table("defrag_plans")
