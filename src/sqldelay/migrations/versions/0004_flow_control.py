"""Flow control: priorities and groups on messages (and dead letters), the groups table, the
per-queue settings table (pause, rate limit, concurrency cap), and the claim's indexes.

Revision ID: 0004
Revises: 0003
"""

from alembic import context, op

from sqldelay.schema import downgrade_table_op, upgrade_table_op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    upgrade_table_op(op, context.config.attributes["table_name"], revision)


def downgrade() -> None:
    downgrade_table_op(op, context.config.attributes["table_name"], revision)
