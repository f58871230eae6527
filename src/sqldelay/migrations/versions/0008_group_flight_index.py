"""The in-flight messages of each group indexed where the database keeps partial indexes
(PostgreSQL), whose grouped claims read a group's state there instead of in the groups table.
Elsewhere nothing changes.

Revision ID: 0008
Revises: 0007
"""

from alembic import context, op

from sqldelay.schema import downgrade_table_op, upgrade_table_op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    attributes = context.config.attributes
    upgrade_table_op(op, attributes["table_name"], revision,
                     history=bool(attributes.get("history")))


def downgrade() -> None:
    downgrade_table_op(op, context.config.attributes["table_name"], revision)
