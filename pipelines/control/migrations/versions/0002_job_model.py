"""The job model: agents, task assignments with generations, per-task view states, history,
leases; task metrics carry the reporting owner's generation.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("task_status") as table:
        table.add_column(sa.Column("generation", sa.Integer, nullable=False, server_default="0"))
    op.create_table(
        "agents",
        sa.Column("agent_id", sa.String(128), primary_key=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("topic", sa.String(255), nullable=False),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("heartbeat_at", sa.Float, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
    )
    op.create_table(
        "task_assignments",
        sa.Column("task", sa.String(255), primary_key=True),
        sa.Column("topic", sa.String(255), nullable=False),
        sa.Column("partition", sa.Integer, nullable=False),
        sa.Column("agent_id", sa.String(128), nullable=True),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("since", sa.Float, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("handoff_to", sa.String(128), nullable=True),
    )
    op.create_table(
        "task_view_states",
        sa.Column("task", sa.String(255), primary_key=True),
        sa.Column("view", sa.String(255), primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("since", sa.Float, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("crashes", sa.Text, nullable=False),
    )
    op.create_table(
        "job_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float, nullable=False, index=True),
        sa.Column("task", sa.String(255), nullable=True),
        sa.Column("view", sa.String(255), nullable=True),
        sa.Column("agent_id", sa.String(128), nullable=True),
        sa.Column("generation", sa.Integer, nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
    )
    op.create_table(
        "leases",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(128), nullable=False),
        sa.Column("term", sa.Integer, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    for table in ("leases", "job_events", "task_view_states", "task_assignments", "agents"):
        op.drop_table(table)
    with op.batch_alter_table("task_status") as table:
        table.drop_column("generation")
