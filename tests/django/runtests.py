"""Run the Django backend's tests with Django's test runner, once per database:

    python -m tests.django.runtests                 # sqlite, postgresql, mariadb
    python -m tests.django.runtests sqlite          # one of them

from the repository's root, in a Python where Django 6 is installed, or Django 4.2-5.2 with the
django-tasks backport (``.ci/run`` builds ``.venv-django`` for the first on Python 3.12, and
``.venv-django-backport`` for Django 5.2 on the suite's Python). A server that cannot be
reached fails the run when CI=true and is skipped otherwise, as in the rest of the suite."""

from __future__ import annotations

import os
import subprocess
import sys

DATABASES = ("sqlite", "postgresql", "mariadb")


def run_one(which: str) -> int:
    """The tests on one database, in this process."""
    os.environ["SQLDELAY_DJANGO_DB"] = which
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.django.settings"
    import django
    from django.conf import settings
    from django.test.utils import get_runner

    django.setup()

    base = get_runner(settings)

    class Runner(base):
        def teardown_databases(self, old_config, **kwargs):
            from sqldelay.django import _engines

            for engine in _engines.values():  # before Django drops the test database
                engine.dispose()
            super().teardown_databases(old_config, **kwargs)

    failures = Runner(verbosity=1).run_tests(["tests.django"])
    return 1 if failures else 0


def reachable(which: str) -> str | None:
    if which == "sqlite":
        return None
    import sqlalchemy as sa

    url = os.environ.get("SQLDELAY_TEST_PG_URL" if which == "postgresql"
                         else "SQLDELAY_TEST_MYSQL_URL",
                         "postgresql+psycopg://postgres@127.0.0.1:5432/test"
                         if which == "postgresql" else "mysql+mysqldb://root@127.0.0.1:3306/test")
    url = sa.make_url(url).set(drivername="postgresql+psycopg" if which == "postgresql"
                               else "mysql+mysqldb")
    engine = sa.create_engine(url)
    try:
        with engine.connect():
            return None
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    finally:
        engine.dispose()


def main(argv: list[str]) -> int:
    import django

    if len(argv) == 2 and argv[0] == "--one":
        return run_one(argv[1])
    chosen = argv or list(DATABASES)
    failed = []
    for which in chosen:
        problem = reachable(which)
        if problem:
            if os.environ.get("CI", "").lower() == "true":
                print(f"{which}: unreachable ({problem}); CI=true requires it")
                failed.append(which)
            else:
                print(f"{which}: skipped, unreachable ({problem})")
            continue
        print(f"== Django backend tests on {which}, Django {django.get_version()} with "
              f"{framework()}", flush=True)
        # a process per database: Django's settings are read once per process
        if subprocess.run([sys.executable, "-m", "tests.django.runtests", "--one", which]
                          ).returncode:
            failed.append(which)
    if failed:
        print("Django backend tests failed on: " + ", ".join(failed))
    return 1 if failed else 0


def framework() -> str:
    """Which tasks framework the backend takes here: Django's own or the backport."""
    try:
        import django.tasks  # noqa: F401
    except ImportError:
        from importlib.metadata import version

        return f"the django-tasks backport {version('django-tasks')}"
    return "django.tasks"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
