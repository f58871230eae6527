"""The group index without the claimed messages of no group, where the database keeps
partial indexes (PostgreSQL): a claim of an ungrouped message no longer adds an entry to it.
Elsewhere nothing changes.

Revision ID: 0011
Revises: 0010
"""

from alembic import context, op

from sqldelay.schema import downgrade_table_op, upgrade_table_op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    attributes = context.config.attributes
    upgrade_table_op(op, attributes["table_name"], revision,
                     history=bool(attributes.get("history")))


def downgrade() -> None:
    downgrade_table_op(op, context.config.attributes["table_name"], revision)
