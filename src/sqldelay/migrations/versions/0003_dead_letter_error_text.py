"""Dead letters keep 2000 characters of any error text on SQL Server and Oracle too.

Revision ID: 0003
Revises: 0002
"""

from alembic import context, op

from sqldelay.schema import widen_error_text_op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    widen_error_text_op(op, context.config.attributes["table_name"])


def downgrade() -> None:
    pass  # the wider column holds everything the narrower one did: nothing to undo
