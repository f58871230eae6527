"""A MySQL server for the suite's MySQL run. Debian's stable release has no MySQL, its
development release (sid) has: the server's package and the libraries it links, those of sid
included, are unpacked into a directory of their own, and the server runs from there through
sid's dynamic loader and C library, beside the machine's own.

    python -m tools.mysql_server DIR -- COMMAND...

unpacks the packages into DIR (once: a DIR that holds a server is used as it is), starts a
server on a free port with its data in a temporary directory, runs COMMAND with
SQLDELAY_TEST_MYSQL_URL naming the server's database ``test``, then stops the server and
exits with COMMAND's status.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile

import sqlalchemy as sa

from .servers import create_test_database, free_port, run_tool, wait_connectable

PACKAGE = "mysql-server-core"
SOURCES = "deb http://deb.debian.org/debian sid main\n"


def _apt_options(root: str) -> list[str]:
    """apt's options for a package index of sid's of its own under ``root``/apt, which leaves
    the machine's sources and index alone."""
    apt = f"{root}/apt"
    settings = {"Dir::Etc::SourceList": f"{apt}/sources.list",
                "Dir::Etc::SourceParts": f"{apt}/sources.list.d",
                "Dir::State::Lists": f"{apt}/lists", "Dir::Cache": f"{apt}/cache",
                "APT::Sandbox::User": "root"}
    return [arg for name, value in settings.items() for arg in ("-o", f"{name}={value}")]


def unpack(root: str) -> None:
    """Unpack the server's package and every package it depends on, as sid has them, into
    ``root`` (nothing to do where a server is there already)."""
    if os.path.exists(f"{root}/usr/sbin/mysqld"):
        return
    apt = f"{root}/apt"
    os.makedirs(f"{apt}/lists/partial", exist_ok=True)
    os.makedirs(f"{apt}/cache/archives/partial", exist_ok=True)
    os.makedirs(f"{apt}/debs", exist_ok=True)
    os.makedirs(f"{apt}/sources.list.d", exist_ok=True)
    with open(f"{apt}/sources.list", "w") as f:
        f.write(SOURCES)
    options = _apt_options(root)
    run_tool(["apt-get", *options, "update", "-qq"])
    tree = subprocess.run(
        ["apt-cache", *options, "depends", "--recurse", "--no-recommends", "--no-suggests",
         "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances", PACKAGE],
        capture_output=True, text=True, check=True).stdout
    # a package's own line starts it; its dependencies are indented, virtual ones in <>
    names = sorted({line for line in tree.splitlines()
                    if line and not line.startswith((" ", "<"))})
    run_tool(["apt-get", *options, "download", *names], cwd=f"{apt}/debs")
    for deb in sorted(glob.glob(f"{apt}/debs/*.deb")):
        run_tool(["dpkg-deb", "-x", deb, root])
    shutil.rmtree(f"{apt}/debs")
    if not os.path.exists(f"{root}/usr/sbin/mysqld"):
        raise RuntimeError(f"{PACKAGE} unpacked into {root} without usr/sbin/mysqld")


class PrivateMySQL:
    """A MySQL server of its own, from the packages unpacked in ``root``, with its data in a
    temporary directory, on a free port, with the database ``test``."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.dir = tempfile.mkdtemp(prefix="sqldelay-mysql-")
        self.port = free_port()
        self.url = f"mysql+pymysql://root@127.0.0.1:{self.port}/test"
        self.proc: subprocess.Popen | None = None
        try:
            os.makedirs(f"{self.dir}/tmp")
            run_tool([*self._mysqld(), "--initialize-insecure"])
            self.start()
            create_test_database(self.url)
        except BaseException:
            self.destroy()
            raise

    def _mysqld(self) -> list[str]:
        """mysqld through sid's dynamic loader, on the libraries unpacked beside it, with the
        options every start takes (no option file: ``--no-defaults`` comes first)."""
        libs = f"{self.root}/usr/lib/x86_64-linux-gnu"
        return [f"{libs}/ld-linux-x86-64.so.2", "--library-path",
                f"{libs}:{self.root}/lib/x86_64-linux-gnu", f"{self.root}/usr/sbin/mysqld",
                "--no-defaults", f"--basedir={self.root}/usr",
                f"--lc-messages-dir={self.root}/usr/share/mysql",
                f"--plugin-dir={self.root}/usr/lib/mysql/plugin",
                f"--datadir={self.dir}/data", f"--tmpdir={self.dir}/tmp",
                *(["--user=root"] if os.geteuid() == 0 else [])]

    def start(self) -> None:
        with open(f"{self.dir}/out", "ab") as out:
            self.proc = subprocess.Popen(
                [*self._mysqld(), f"--port={self.port}", "--bind-address=127.0.0.1",
                 f"--socket={self.dir}/sock", f"--pid-file={self.dir}/pid", "--mysqlx=OFF",
                 "--secure-file-priv=NULL", "--skip-log-bin", f"--log-error={self.dir}/error.log",
                 "--innodb-buffer-pool-size=256M"],
                stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_connectable(self.url.replace("/test", "/"), timeout=60)
        except Exception:
            raise RuntimeError(f"mysqld did not come up: {self._log_tail()}") from None

    def _log_tail(self) -> str:
        text = ""
        for name in ("out", "error.log"):  # mysqld adds .err to a name with no extension
            if os.path.exists(f"{self.dir}/{name}"):
                with open(f"{self.dir}/{name}", errors="replace") as f:
                    text += f.read()[-2000:]
        return text

    def destroy(self) -> None:
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(60)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(60)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    root = os.path.abspath(argv[0])
    unpack(root)
    server = PrivateMySQL(root)
    try:
        with sa.create_engine(server.url, poolclass=sa.pool.NullPool).connect() as conn:
            version = conn.exec_driver_sql("SELECT VERSION()").scalar()
        print(f"MySQL {version} at {server.url}", flush=True)
        return subprocess.run(argv[2:], env={**os.environ,
                                             "SQLDELAY_TEST_MYSQL_URL": server.url}).returncode
    finally:
        server.destroy()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
