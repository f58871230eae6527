"""Trace context: the producer's W3C traceparent stored with a message by traced offers
(sqldelay[otel]), so the consumer's span links to it.

Revision ID: 0006
Revises: 0005
"""

from alembic import context, op

from sqldelay.schema import downgrade_table_op, upgrade_table_op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    attributes = context.config.attributes
    upgrade_table_op(op, attributes["table_name"], revision,
                     history=bool(attributes.get("history")))


def downgrade() -> None:
    downgrade_table_op(op, context.config.attributes["table_name"], revision)
