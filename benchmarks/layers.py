"""What one single-statement call costs at each layer on PostgreSQL, in client CPU.

``python -m benchmarks.layers --url postgresql+psycopg://postgres@127.0.0.1:5432/test``
runs the same one-row SELECT, ``CALLS`` times per layer in one thread, the layers taking
turns for ``ROUNDS`` rounds, and prints the median CPU microseconds per call of each:

- psycopg alone, on one connection in autocommit (the floor of a Python client);
- a SQLAlchemy Connection held open, ``execute`` of a Core statement;
- ``engine.connect()`` + ``execute`` + close, on an engine created in autocommit;
- the same on an autocommit view of an ordinary engine
  (``engine.execution_options(isolation_level="AUTOCOMMIT")``), which is what sqldelay's
  one-statement operations used until 082e535;
- ``connect()`` on the ordinary engine, the dialect switching the DBAPI connection to
  autocommit and back around the call, as sqldelay's engine layer does (``QueueDao.in_autocommit``):
  it must share the caller's engine and its pool.

A sqldelay poll or ack is one such call plus the library's own work around it (the claim's
rows made into envelopes, the payload decoded); the throughput scenarios' "psycopg alone"
and "SQLAlchemy alone" subjects and client CPU per message put the whole operation beside
this.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import sqlalchemy as sa

from sqldelay.dialects import QueueDao

from .harness import ROUNDS, alternate, spread

CALLS = 2_000


def layers(url: str) -> dict[str, Callable[[], None]]:
    import psycopg

    engine = sa.create_engine(url)
    view = engine.execution_options(isolation_level="AUTOCOMMIT")
    autocommit = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    stmt = sa.select(sa.bindparam("x", type_=sa.Integer))
    compiled = stmt.compile(dialect=engine.dialect)
    raw = psycopg.connect(sa.make_url(url).set(drivername="postgresql")
                          .render_as_string(hide_password=False), autocommit=True)
    held = autocommit.connect()

    def through(eng: sa.Engine) -> Callable[[], None]:
        def call() -> None:
            with eng.connect() as conn:
                conn.execute(stmt, {"x": 1}).fetchall()
        return call

    def switched() -> None:
        with engine.connect() as conn:
            QueueDao.in_autocommit(lambda c: c.execute(stmt, {"x": 1}).fetchall(), conn)

    return {
        "psycopg alone": lambda: raw.execute(str(compiled), {"x": 1}).fetchall(),
        "SQLAlchemy, connection held": lambda: held.execute(stmt, {"x": 1}).fetchall(),
        "SQLAlchemy, connect per call (autocommit engine)": through(autocommit),
        "SQLAlchemy, connect per call (autocommit view)": through(view),
        "SQLAlchemy, connect per call (autocommit switched, as sqldelay)": switched,
    }


def cpu_per_call(call: Callable[[], None]) -> float:
    """Microseconds of this process's CPU per call, over ``CALLS`` calls after a warm-up."""
    for _ in range(100):
        call()
    began = time.process_time()
    for _ in range(CALLS):
        call()
    return (time.process_time() - began) * 1e6 / CALLS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="a PostgreSQL URL (psycopg)")
    args = parser.parse_args()
    calls = layers(args.url)
    runs = alternate(ROUNDS, {name: (lambda c=c: cpu_per_call(c)) for name, c in calls.items()})
    for name, values in runs.items():
        stats = spread(values)
        print(f"{name:64s} {stats['median']:7.1f} µs CPU per call "
              f"(min {stats['min']:.1f}, max {stats['max']:.1f})")


if __name__ == "__main__":
    main()
