"""PostgreSQL claim statements against psycopg's cache of converted statements.

psycopg rewrites a statement's ``%(name)s`` placeholders into ``$n`` on every call, and keeps
the result only for texts of up to ``MAX_CACHED_STATEMENT_LENGTH`` bytes: a longer claim pays
the conversion (70 µs for the grouped claim's walk) on each call. The grouped claim's two
statements fit whatever the queue table is called (sqldelay takes names of up to 40
characters), the plain claim up to 35 (38 in a caller's transaction, where it does not bound
its lock waits); the rate-limited claim, 8 kB, does not fit.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH

from sqldelay.dialects.postgresql import PostgresQueueDao
from sqldelay.schema import queue_table


def lengths(name: str, statements) -> dict[str, int]:
    """The length in bytes of each statement ``statements(dao)`` names, as psycopg gets it."""
    dialect = sa.make_url("postgresql+psycopg://").get_dialect()()
    dao = PostgresQueueDao(queue_table(sa.MetaData(), name))
    out = {}
    for label, stmt in statements(dao).items():
        text = str(stmt.compile(dialect=dialect))
        assert name in text, label  # the table's own name is in it
        out[label] = len(text.encode())
    return out


def grouped(dao: PostgresQueueDao) -> dict[str, sa.Executable]:
    out = {f"walk {gated, own}": walk for (gated, own), walk in dao._win_groups.items()}
    return {**out, "heads' claim": dao._heads_claim(False),
            "heads' claim naming its holder": dao._heads_claim(True)}


@pytest.mark.parametrize("name", ["delayed_queue", "q" * 40])
def test_the_grouped_claims_statements_fit_the_drivers_cache(name):
    for label, length in lengths(name, grouped).items():
        assert length <= MAX_CACHED_STATEMENT_LENGTH, (label, length)


def plain(dao: PostgresQueueDao, own: bool) -> dict[str, sa.Executable]:
    """The plain claims in sqldelay's own transaction (``own``: their lock waits bounded) or
    in a caller's."""
    return {f"plain claim{' naming its holder' * by}":
            dao._claim_statement(("guard",), by, gives_way=own) for by in (False, True)}


@pytest.mark.parametrize(("own", "longest"), [(True, 35), (False, 38)],
                         ids=["sqldelay's transaction", "the caller's"])
def test_the_plain_claim_fits_the_drivers_cache_up_to_a_length_of_name(own, longest):
    for label, length in lengths("q" * longest, lambda dao: plain(dao, own)).items():
        assert length <= MAX_CACHED_STATEMENT_LENGTH, (label, length)
