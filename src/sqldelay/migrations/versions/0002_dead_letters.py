"""The dead-letter table beside the queue table.

Revision ID: 0002
Revises: 0001
"""

from alembic import context, op

from sqldelay.schema import downgrade_table_op, upgrade_table_op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    upgrade_table_op(op, context.config.attributes["table_name"], revision)


def downgrade() -> None:
    downgrade_table_op(op, context.config.attributes["table_name"], revision)
