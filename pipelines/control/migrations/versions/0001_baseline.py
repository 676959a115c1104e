"""The control store before the job model: task metrics, workers, deployments, scaling, samples.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "task_status",
        sa.Column("task", sa.String(255), primary_key=True),
        sa.Column("topic", sa.String(255), nullable=False),
        sa.Column("partition", sa.Integer, nullable=False),
        sa.Column("worker_id", sa.String(64), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("consumed", sa.Integer, nullable=False),
        sa.Column("processed", sa.Integer, nullable=False),
        sa.Column("dead_lettered", sa.Integer, nullable=False),
        sa.Column("dropped_late", sa.Integer, nullable=False),
        sa.Column("busy_s", sa.Float, nullable=False),
        sa.Column("utilization", sa.Float, nullable=False),
        sa.Column("rate_in", sa.Float, nullable=False),
        sa.Column("next_offset", sa.Integer, nullable=False),
        sa.Column("end_offset", sa.Integer, nullable=False),
        sa.Column("backlog", sa.Integer, nullable=False),
        sa.Column("last_processed_ts", sa.Float, nullable=True),
        sa.Column("watermark", sa.Float, nullable=True),
        sa.Column("checkpointed_offset", sa.Integer, nullable=True),
        sa.Column("heartbeat_at", sa.Float, nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("views", sa.Text, nullable=False),
    )
    op.create_table(
        "worker_status",
        sa.Column("worker_id", sa.String(64), primary_key=True),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("tasks", sa.Text, nullable=False),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("heartbeat_at", sa.Float, nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
    )
    op.create_table(
        "view_deployments",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("fingerprint", sa.Text, nullable=False),
        sa.Column("definition", sa.Text, nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("deployed_at", sa.Float, nullable=False),
        sa.Column("crashes", sa.Text, nullable=False),
    )
    op.create_table(
        "fleet_scaling",
        sa.Column("topic", sa.String(255), primary_key=True),
        sa.Column("desired_workers", sa.Integer, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("policy", sa.String(64), nullable=False),
        sa.Column("requested_at", sa.Float, nullable=False),
        sa.Column("applied_workers", sa.Integer, nullable=True),
        sa.Column("applied_at", sa.Float, nullable=True),
    )
    op.create_table(
        "fleet_samples",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("sampled_at", sa.Float, nullable=False, index=True),
        sa.Column("topic", sa.String(255), nullable=False),
        sa.Column("workers", sa.Integer, nullable=False),
        sa.Column("tasks", sa.Integer, nullable=False),
        sa.Column("backlog", sa.BigInteger, nullable=False),
        sa.Column("max_time_lag_s", sa.Float, nullable=True),
        sa.Column("min_watermark_ms", sa.BigInteger, nullable=True, index=True),
        sa.Column("consumed", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "rate_history",
        sa.Column("topic", sa.String(255), primary_key=True),
        sa.Column("minute", sa.BigInteger, primary_key=True),
        sa.Column("snapshot", sa.Text, nullable=False),
    )


def downgrade() -> None:
    for table in (
        "rate_history",
        "fleet_samples",
        "fleet_scaling",
        "view_deployments",
        "worker_status",
        "task_status",
    ):
        op.drop_table(table)
