"""Database servers of their own, on this machine: what tests that stop a server, and
benchmarks that need several, start in a temporary directory."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time

import sqlalchemy as sa


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_connectable(url: str, timeout: float = 30.0) -> None:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                with engine.connect() as conn:
                    conn.exec_driver_sql("SELECT 1")
                return
            except sa.exc.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    finally:
        engine.dispose()


class ServerMissing(RuntimeError):
    """The server's programs are not installed on this machine."""


def run_tool(command: list[str], **kwargs) -> None:
    """Run a server's setup program; when it fails, the error carries what it printed."""
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} exited with {done.returncode}:\n"
                           f"{done.stdout[-2000:]}{done.stderr[-2000:]}")


class PrivatePostgres:
    """A PostgreSQL server of its own (initdb + pg_ctl, as the ``postgres`` OS user when run
    as root) in a temporary directory on a free port: for tests that stop it, and for
    benchmarks that need several servers."""

    def __init__(self) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
        if not found:
            raise ServerMissing("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
        self.bin = os.path.dirname(found[-1])
        self.dir = tempfile.mkdtemp(prefix="sqldelay-pg-")
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            shutil.chown(self.dir, "postgres")
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        self._run("initdb", "-D", f"{self.dir}/data", "-A", "trust", "-U", "postgres",
                  "--no-sync")
        self.start()

    def _run(self, tool: str, *args: str) -> None:
        command = [f"{self.bin}/{tool}", *args]
        if self.as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        run_tool(command)

    def start(self) -> None:
        self._run("pg_ctl", "-D", f"{self.dir}/data", "-w", "-l", f"{self.dir}/log", "-o",
                  f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off",
                  "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", f"{self.dir}/data", "-w", "-m", mode, "stop")

    def destroy(self) -> None:
        try:
            self.stop("immediate")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the server's processes have used so far: the postmaster
        and its children, from /proc (0.0 where /proc is missing)."""
        try:
            with open(f"{self.dir}/data/postmaster.pid") as f:
                root = int(f.readline())
        except OSError:
            return 0.0
        return tree_cpu_seconds(root)


def create_test_database(url: str) -> None:
    """Create the database ``test`` on the MySQL or MariaDB server of ``url`` (which names
    it), where missing."""
    engine = sa.create_engine(url.replace("/test", "/"), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("CREATE DATABASE IF NOT EXISTS test")
    finally:
        engine.dispose()


def mariadb_options(home: str) -> list[str]:
    """The options every mariadbd (and mariadb-install-db) on the data directory
    ``home``/data takes. The temporary directory is the server's own, ``home``/tmp: a starting
    mariadbd deletes every ``#sql*`` file in its tmpdir, so servers sharing /tmp (another
    test's, the shared service) delete each other's temporary tables, and an installation
    running beside a start fails with "Can't find file: '/tmp/#sql-temptable-…'"."""
    os.makedirs(f"{home}/tmp", exist_ok=True)
    return ["--no-defaults", f"--datadir={home}/data", f"--tmpdir={home}/tmp",
            *(["--user=root"] if os.geteuid() == 0 else [])]


def mariadb_programs() -> tuple[str, str]:
    """The paths of mariadb-install-db and mariadbd."""
    install, server = shutil.which("mariadb-install-db"), shutil.which("mariadbd")
    if not install or not server:
        raise ServerMissing("mariadb-install-db / mariadbd are not installed")
    return install, server


def install_mariadb(home: str) -> None:
    """Make a MariaDB data directory in ``home``/data: root without a password, no test
    database."""
    run_tool([mariadb_programs()[0], *mariadb_options(home),
              "--auth-root-authentication-method=normal", "--skip-test-db",
              "--skip-name-resolve"])


class PrivateMariaDB:
    """A MariaDB server of its own (mariadb-install-db + mariadbd) in a temporary directory
    on a free port, with the database ``test``: for tests that stop it."""

    def __init__(self) -> None:
        self.server = mariadb_programs()[1]
        self.dir = tempfile.mkdtemp(prefix="sqldelay-maria-")
        self.port = free_port()
        self.url = f"mariadb+pymysql://root@127.0.0.1:{self.port}/test"
        self.proc: subprocess.Popen | None = None
        try:
            install_mariadb(self.dir)
            self.start()
            create_test_database(self.url)
        except BaseException:
            self.destroy()
            raise

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.server, *mariadb_options(self.dir), f"--socket={self.dir}/sock",
             f"--port={self.port}", "--bind-address=127.0.0.1", f"--pid-file={self.dir}/pid",
             f"--log-error={self.dir}/log", "--skip-log-bin", "--innodb-buffer-pool-size=32M"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_connectable(self.url.replace("/test", "/"))

    def stop(self) -> None:
        self.proc.terminate()  # a clean shutdown, as a service manager would do it
        self.proc.wait(60)

    def destroy(self) -> None:
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(60)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def process_cpu(pid: int) -> tuple[int, float] | None:
    """A process's parent pid and the CPU time (user + system) it has used so far, from
    /proc; None when it has ended (or there is no /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / tick  # ppid; utime + stime


def tree_cpu_seconds(root: int) -> float:
    """CPU time (user + system) process ``root`` and its children have used so far."""
    total = 0.0
    for stat in glob.glob("/proc/[0-9]*/stat"):
        pid = int(stat.split("/")[2])
        got = process_cpu(pid)
        if got is not None and root in (pid, got[0]):
            total += got[1]
    return total
