"""Alembic environment for the sqldelay queue table.

The database URL comes from ``-x url=…`` or the SQLDELAY_URL environment variable; the table
name from ``-x table=…`` (default ``delayed_queue``), a storage preset from ``-x tuning=…``
(as ``create_schema(tuning=…)`` takes it). Each queue table keeps its migration state in its
own version table, ``<table>_alembic``, so sqldelay's migrations never mix with the
application's own ``alembic_version``.
"""

import os
from logging.config import fileConfig

import sqlalchemy as sa
from alembic import context

import sqldelay  # noqa: F401  (registers every dialect's column DDL)
from sqldelay.schema import DEFAULT_TABLE

config = context.config
if config.config_file_name is not None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)

x_args = context.get_x_argument(as_dictionary=True)
url = x_args.get("url") or os.environ.get("SQLDELAY_URL")
if not url:
    raise SystemExit("no database URL: pass -x url=DIALECT+DRIVER://… or set SQLDELAY_URL")
table_name = x_args.get("table", DEFAULT_TABLE)
config.attributes["table_name"] = table_name
config.attributes["tuning"] = x_args.get("tuning")  # a create_schema tuning preset
version_table = f"{table_name}_alembic"

if context.is_offline_mode():
    context.configure(url=url, literal_binds=True, version_table=version_table)
    with context.begin_transaction():
        context.run_migrations()
else:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, version_table=version_table)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()
