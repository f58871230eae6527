"""The claim-order index of the waiting messages split in two, those of no group and those
of a group, and the group index with the messages of a group alone, where the database keeps
partial indexes (PostgreSQL): a message waiting is in one of these indexes where it was in
two. Elsewhere nothing changes.

Revision ID: 0012
Revises: 0011
"""

from alembic import context, op

from sqldelay.schema import downgrade_table_op, upgrade_table_op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    attributes = context.config.attributes
    upgrade_table_op(op, attributes["table_name"], revision,
                     history=bool(attributes.get("history")))


def downgrade() -> None:
    downgrade_table_op(op, context.config.attributes["table_name"], revision)
