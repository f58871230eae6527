"""The dead letters indexed by key (``<table>_dead_key_ix``): a task's status and a listing of
one key's dead letters read just that key's, not every dead letter of its queue.

Revision ID: 0010
Revises: 0009
"""

from alembic import context, op

from sqldelay.schema import downgrade_table_op, upgrade_table_op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    attributes = context.config.attributes
    upgrade_table_op(op, attributes["table_name"], revision,
                     history=bool(attributes.get("history")))


def downgrade() -> None:
    downgrade_table_op(op, context.config.attributes["table_name"], revision)
