"""Task crashes: the offset ranges a task crashed on, from which records are quarantined.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "task_crashes",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("task", sa.String(255), nullable=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("agent_id", sa.String(128), nullable=True),
        sa.Column("generation", sa.Integer, nullable=True),
        sa.Column("view", sa.String(255), nullable=True),
        sa.Column("first_offset", sa.BigInteger, nullable=False),
        sa.Column("end_offset", sa.BigInteger, nullable=False),
        sa.Column("record_ts", sa.BigInteger, nullable=True),
        sa.Column("error", sa.Text, nullable=False),
    )
    op.create_index("ix_task_crashes_task", "task_crashes", ["task"])


def downgrade() -> None:
    op.drop_index("ix_task_crashes_task", "task_crashes")
    op.drop_table("task_crashes")
