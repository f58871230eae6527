"""The example project of docs/django.md, run as a reader runs it: migrate, enqueue from
``manage.py shell``, ``manage.py sqldelay_worker --drain``, read the results."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from django.test import SimpleTestCase

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "django-example"


@unittest.skipUnless(os.environ.get("SQLDELAY_DJANGO_DB", "sqlite") == "sqlite",
                     "the example project keeps its own SQLite database: the sqlite pass runs it")
class ExampleProjectTests(SimpleTestCase):
    def setUp(self) -> None:
        self.project = Path(tempfile.mkdtemp())
        shutil.copytree(EXAMPLE, self.project, dirs_exist_ok=True)
        self.addCleanup(shutil.rmtree, self.project)

    def manage(self, *args: str) -> str:
        env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
        done = subprocess.run([sys.executable, "manage.py", *args], cwd=self.project, env=env,
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 0, f"manage.py {' '.join(args)}:\n{done.stderr}")
        return done.stdout

    def test_the_walkthrough_of_the_docs(self) -> None:
        self.manage("migrate", "-v", "0")
        welcome, total = self.manage("shell", "-v", "0", "-c", (
            "from shop.tasks import send_welcome, total\n"
            "print(send_welcome.enqueue(42).id)\n"
            "print(total.enqueue([9.5, 10.5], discount=0.1).id)")).split()
        self.assertTrue(welcome.startswith("emails.") and total.startswith("default."))
        self.assertEqual(self.manage("sqldelay_worker", "--drain").strip(),
                         "ran 2 task(s) of queue(s) default, emails")
        self.assertEqual(self.manage("shell", "-v", "0", "-c", (
            "from shop.tasks import send_welcome, total\n"
            f"r = send_welcome.get_result({welcome!r})\n"
            "print(r.status, r.return_value)\n"
            f"print(total.get_result({total!r}).return_value)")).splitlines(),
            ["SUCCESSFUL welcome mail for user 42", "18.0"])
