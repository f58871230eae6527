"""``pip install 'sqldelay[web]'`` plus the extra of the database's own driver serves every URL
the README names: the asyncio driver the service takes for it (``engines.async_url``) comes
with one of the two."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import sqlalchemy as sa

from sqldelay.engines import DRIVERS, async_url

EXTRAS = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())[
    "project"]["optional-dependencies"]
URLS = ["sqlite:///queue.db", "postgresql+psycopg://app@db/app", "mysql+pymysql://root@db/app",
        "mariadb+pymysql://root@db/app", "mysql+mysqldb://root@db/app",
        "mariadb+mysqldb://root@db/app"]


def names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in requirements}


@pytest.mark.parametrize("url", URLS)
def test_the_web_extra_serves_the_url_with_the_databases_own_extra(url):
    blocking = sa.make_url(url).get_driver_name()
    own = EXTRAS[DRIVERS[blocking][1]] if blocking in DRIVERS else []  # SQLite: built in
    installed = names(EXTRAS["web"]) | names(own)
    driver = async_url(url).get_driver_name()
    needed = names(EXTRAS[DRIVERS[driver][1]])
    assert needed <= installed, (f"the service serves {url} through {driver}, which neither "
                                 f"the web extra nor the database's own installs")
