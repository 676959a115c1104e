"""Per worker: where its time went over the last report.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("worker_status") as table:
        table.add_column(sa.Column("time_shares", sa.Text, nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("worker_status") as table:
        table.drop_column("time_shares")
