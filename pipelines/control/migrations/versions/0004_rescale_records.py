"""Rescale records (what each rescale really paused) and each task's checkpointed state size.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("task_status") as table:
        table.add_column(
            sa.Column("state_bytes", sa.BigInteger, nullable=False, server_default="0")
        )
    op.create_table(
        "rescales",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("topic", sa.String(255), nullable=False),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("settled_at", sa.Float, nullable=False),
        sa.Column("from_agents", sa.Integer, nullable=False),
        sa.Column("to_agents", sa.Integer, nullable=False),
        sa.Column("tasks_moved", sa.Integer, nullable=False),
        sa.Column("state_bytes", sa.BigInteger, nullable=False),
        sa.Column("pause_s", sa.Float, nullable=False),
        sa.Column("task_pause_s", sa.Float, nullable=False),
        sa.Column("max_task_pause_s", sa.Float, nullable=False),
    )
    op.create_index("ix_rescales_topic", "rescales", ["topic"])


def downgrade() -> None:
    op.drop_index("ix_rescales_topic", "rescales")
    op.drop_table("rescales")
    with op.batch_alter_table("task_status") as table:
        table.drop_column("state_bytes")
