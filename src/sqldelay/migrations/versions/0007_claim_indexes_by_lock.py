"""Claim indexes split by lock where the database keeps partial indexes (PostgreSQL): the
unlocked messages in claim order, and the locked ones by their lock's expiry, in place of the
claim index and the lock index. Elsewhere nothing changes.

Revision ID: 0007
Revises: 0006
"""

from alembic import context, op

from sqldelay.schema import downgrade_table_op, upgrade_table_op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    attributes = context.config.attributes
    upgrade_table_op(op, attributes["table_name"], revision,
                     history=bool(attributes.get("history")))


def downgrade() -> None:
    downgrade_table_op(op, context.config.attributes["table_name"], revision)
