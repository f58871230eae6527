"""The queue table and its indexes.

Revision ID: 0001
Revises:
"""

from alembic import context, op

from sqldelay.schema import QUEUE, tuning_ddl

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    attributes = context.config.attributes
    ddl = tuning_ddl(op.get_context().dialect, attributes["table_name"], attributes["tuning"])
    QUEUE.create_op(op, attributes["table_name"], revision)
    for statement in ddl:
        op.execute(statement)


def downgrade() -> None:
    op.drop_table(QUEUE.name(context.config.attributes["table_name"]))
