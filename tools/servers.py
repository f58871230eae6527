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
        subprocess.run(command, check=True, capture_output=True)

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
