"""The results of tasks that keep them (``sqldelay.tasks``): ``<table>_results``, a row per
task message whose function returned, pruned by workers after its retention.

Revision ID: 0009
Revises: 0008
"""

from alembic import context, op

from sqldelay.schema import downgrade_table_op, upgrade_table_op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    attributes = context.config.attributes
    upgrade_table_op(op, attributes["table_name"], revision,
                     history=bool(attributes.get("history")))


def downgrade() -> None:
    downgrade_table_op(op, context.config.attributes["table_name"], revision)
