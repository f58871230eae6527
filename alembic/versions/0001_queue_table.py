"""The queue table and its indexes.

Revision ID: 0001
Revises:
"""

from alembic import context, op

from sqldelay.schema import create_table_op, drop_table_op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    attributes = context.config.attributes
    create_table_op(op, attributes["table_name"], tuning=attributes["tuning"])


def downgrade() -> None:
    drop_table_op(op, context.config.attributes["table_name"])
