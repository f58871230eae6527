"""Traceability: who offered a message and who holds it (on messages and dead letters), and
the event history table (when asked for: create_schema(history=True), -x history=true).

Revision ID: 0005
Revises: 0004
"""

from alembic import context, op

from sqldelay.schema import downgrade_table_op, upgrade_table_op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    attributes = context.config.attributes
    upgrade_table_op(op, attributes["table_name"], revision,
                     history=bool(attributes.get("history")))


def downgrade() -> None:
    downgrade_table_op(op, context.config.attributes["table_name"], revision)
