"""Input ends: the end offsets a finished bounded replay left on its topic.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "input_ends",
        sa.Column("topic", sa.String(255), primary_key=True),
        sa.Column("end_offsets", sa.Text, nullable=False),
        sa.Column("recorded_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("input_ends")
