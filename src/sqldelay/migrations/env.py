"""Alembic environment of sqldelay's own migrations.

Run from code (``sqldelay.migrate``: create_schema, ``sqldelay migrate``) it is handed a
connection, a table name and a tuning preset. Run by the ``alembic`` command (alembic.ini at
the root of a source checkout), the URL comes from ``-x url=…`` or SQLDELAY_URL, the table
name from ``-x table=…`` (default ``delayed_queue``), a storage preset from ``-x tuning=…``,
the history table with ``-x history=true``;
for offline SQL (``--sql``) of a mysql:// URL, ``-x flavor=mysql`` or ``-x flavor=mariadb``.
Each queue table keeps its migration state in its own version table, ``<table>_alembic``, so
sqldelay's migrations never mix with the application's own ``alembic_version``.
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
given = config.attributes.get("connection")
table_name = config.attributes.get("table_name") or x_args.get("table", DEFAULT_TABLE)
config.attributes["table_name"] = table_name
config.attributes.setdefault("tuning", x_args.get("tuning"))  # a create_schema tuning preset
# the history table, made by the migration that introduced it (create_schema(history=True))
config.attributes.setdefault("history", x_args.get("history", "").lower() in ("true", "1", "yes"))
version_table = f"{table_name}_alembic"

if given is not None:
    context.configure(connection=given, version_table=version_table)
    with context.begin_transaction():
        context.run_migrations()
else:
    url: str | sa.URL | None = x_args.get("url") or os.environ.get("SQLDELAY_URL")
    if not url:
        raise SystemExit("no database URL: pass -x url=DIALECT+DRIVER://… or set SQLDELAY_URL")
    if context.is_offline_mode():
        # Offline there is no server to ask whether a mysql:// URL means MySQL or MariaDB,
        # and the key column's binary collation differs: -x flavor=mysql|mariadb says which
        parsed = sa.make_url(url)
        flavor = x_args.get("flavor")
        if parsed.get_backend_name() in ("mysql", "mariadb"):
            if flavor not in ("mysql", "mariadb") and parsed.get_backend_name() == "mysql":
                raise SystemExit("offline SQL for a mysql:// URL needs -x flavor=mysql or "
                                 "-x flavor=mariadb: the key column's collation differs")
            if flavor == "mariadb":
                url = parsed.set(drivername=parsed.drivername.replace("mysql", "mariadb", 1))
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
