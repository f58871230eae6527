"""A Spark standalone cluster on this machine, and the packed environment its executors run.

Both come from what is installed here, so that the Spark tests (and
``benchmarks/spark_offer.py --cluster``) run sqldelay the way docs/spark.md tells users to run
it on a real cluster: in executors that Worker daemons start, with sqldelay shipped as a
packed virtual environment (``spark.archives``) rather than found in the driver's Python.

No pytest in here: the benchmark imports this module too.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pyspark

REPO = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).resolve().parent
# Spark unpacks the archive named "#environment" into each executor's working directory;
# this path is relative to it
EXECUTOR_PYTHON = "./environment/bin/python"
# the executors' JVM comes with the cluster's Spark: the packed pyspark needs only its Python
# modules, not its 460 MB of jars
PACK_EXCLUDE = "lib/python*/site-packages/pyspark/jars/*"
POLL_INTERVAL_S = 0.25
# the driver's and the daemons' environment must not lead a Python worker to this checkout's
# virtual environment: executors get their Python from the packed archive only
_DRIVER_ONLY_VARIABLES = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV", "PYTHONPATH",
                          "PYTHONHOME")


class ClusterError(RuntimeError):
    """The cluster or its environment could not be made ready; the message says why."""


def poll(ready: Callable[[], bool], timeout_s: float) -> bool:
    """Whether ``ready()`` became true within ``timeout_s``, asking every POLL_INTERVAL_S."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_INTERVAL_S)
    return True


def _run(command: list[str], **kwargs) -> None:
    """Run a set-up step; its output becomes the error message when it fails."""
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        raise ClusterError(f"{' '.join(command)} exited with {done.returncode}:\n"
                           f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def _driver_versions() -> str:
    """``name==version`` of every distribution installed beside the driver but sqldelay.

    As pip constraints they make the executors' pyspark the cluster JVM's version and every
    other package the one the driver runs with."""
    names = {(d.metadata["Name"] or "").lower(): d.version
             for d in importlib.metadata.distributions()}
    names.pop("sqldelay", None)
    names.pop("", None)
    return "".join(f"{name}=={version}\n" for name, version in sorted(names.items()))


def pack_job_environment(directory: Path, extras: str = "spark,postgresql,mysql") -> Path:
    """Build sqldelay's wheel, install it with ``extras`` into a fresh venv, pack it.

    Non-editable on purpose: venv-pack refuses editable installs, and the executors are to
    run the packaged library, not this checkout. Returns the ``.tar.gz``; the venv it was packed
    from is removed (nearly 1 GB that nothing reads afterwards).
    """
    import venv_pack

    directory.mkdir(parents=True, exist_ok=True)
    wheels = directory / "dist"
    # sdist first, then the wheel from it in a temporary directory: no build/ in the checkout
    _run([sys.executable, "-m", "build", "--outdir", str(wheels), str(REPO)])
    wheel = next(wheels.glob("sqldelay-*.whl"))
    constraints = directory / "constraints.txt"
    constraints.write_text(_driver_versions())
    venv = directory / "venv"
    # no pip of its own (installing it took 6 s): this interpreter's pip installs into it
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
          "--quiet", "-c", str(constraints), f"{wheel}[{extras}]"])
    archive = directory / "sqldelay-env.tar.gz"
    # the lightest compression: 10 s to pack instead of 14, the archive 140 MB instead of 128
    venv_pack.pack(prefix=str(venv), output=str(archive), filters=[("exclude", PACK_EXCLUDE)],
                   compress_level=1)
    shutil.rmtree(venv)
    return archive


def _free_port() -> int:
    """A loopback port nobody listens on now (the daemon binds it a moment later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs; zombies do not count, since no one
    may reap the orphaned executors here (PID 1 need not be an init)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended while we looked
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _end_group(daemon: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM a daemon's process group, which holds the executors a Worker started and their
    Python workers too; SIGKILL what is left of it after ``grace_s``."""
    _signal_group(daemon.pid, signal.SIGTERM)
    try:
        daemon.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    if not poll(lambda: not _group_alive(daemon.pid), grace_s):
        _signal_group(daemon.pid, signal.SIGKILL)
    daemon.wait()
    if not poll(lambda: not _group_alive(daemon.pid), grace_s):
        raise ClusterError(f"processes of group {daemon.pid} survived SIGKILL")


class StandaloneCluster:
    """One master and ``workers`` workers on loopback ports, each a ``spark-class`` daemon in a
    process group of its own, with logs, work and scratch directories under ``base``."""

    def __init__(self, base: Path, *, workers: int = 2, cores: int = 1,
                 memory: str = "2g") -> None:
        self.base = base
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.master_url = ""
        self.web_url = ""
        self._daemons: list[tuple[str, subprocess.Popen]] = []

    @property
    def daemon_pids(self) -> dict[str, int]:
        return {name: proc.pid for name, proc in self._daemons}

    def work_dir(self, worker: int) -> Path:
        """Where worker ``worker`` runs its executors (one directory per application)."""
        return self.base / f"worker{worker}" / "work"

    def start(self, timeout_s: float = 180) -> None:
        """Start the master, wait until it is ALIVE, start the workers and wait until all of
        them are registered. Stops whatever it started if it fails."""
        port, web_port = _free_port(), _free_port()
        self.master_url = f"spark://127.0.0.1:{port}"
        self.web_url = f"http://127.0.0.1:{web_port}"
        try:
            self._launch("master", "org.apache.spark.deploy.master.Master", "--host",
                         "127.0.0.1", "--port", str(port), "--webui-port", str(web_port))
            # workers started before the master answers retry only after 5-15 s
            self._await(lambda s: s.get("status") == "ALIVE", "the master", timeout_s)
            for i in range(self.workers):
                self._launch(f"worker{i}", "org.apache.spark.deploy.worker.Worker",
                             "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
                             "--cores", str(self.cores), "--memory", self.memory,
                             "--work-dir", str(self.work_dir(i)), self.master_url)
            self._await(lambda s: s.get("aliveworkers") == self.workers,
                        f"{self.workers} registered workers", timeout_s)
        except BaseException:
            self.stop()
            raise

    def stop(self, grace_s: float = 30) -> None:
        """End the workers (with their executors), then the master; idempotent. The copies
        of the environment the executors unpacked (over 400 MB each) go too, their logs stay."""
        while self._daemons:
            _, daemon = self._daemons.pop()
            _end_group(daemon, grace_s)
        for unpacked in self.base.glob("worker*/work/app-*/*/environment"):
            shutil.rmtree(unpacked)

    def session_conf(self, archive: Path) -> dict[str, str]:
        """SparkSession settings (besides the master URL) of an application on this cluster
        whose executors run the packed environment ``archive`` (docs/spark.md, "A real
        cluster")."""
        return {
            "spark.archives": f"{archive}#environment",
            # executors' Python UDF, Arrow and data source workers: the shipped environment.
            # PYSPARK_PYTHON stays the driver's Python: the data source's planning and commit
            # run in Python workers beside the driver, where ./environment does not exist
            "spark.sql.execution.pyspark.python": EXECUTOR_PYTHON,
            "spark.executor.cores": "1",
            "spark.executor.memory": "1g",
            "spark.cores.max": str(self.workers * self.cores),
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
        }

    def log_tail(self, chars: int = 2000) -> str:
        """The end of every daemon's log, for error messages."""
        return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-chars:]}"
                         for log in sorted((self.base / "logs").glob("*.log")))

    def _environment(self, name: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _DRIVER_ONLY_VARIABLES}
        conf = self.base / "conf"  # empty: no spark-defaults.conf or spark-env.sh of the host
        conf.mkdir(parents=True, exist_ok=True)
        scratch = self.base / name / "scratch"
        scratch.mkdir(parents=True, exist_ok=True)
        env.update(SPARK_HOME=str(SPARK_HOME), SPARK_CONF_DIR=str(conf),
                   SPARK_LOG_DIR=str(self.base / "logs"), SPARK_LOCAL_DIRS=str(scratch),
                   SPARK_LOCAL_IP="127.0.0.1")
        return env

    def _launch(self, name: str, main_class: str, *args: str) -> None:
        logs = self.base / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / f"{name}.log", "wb") as log:
            daemon = subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), main_class, *args],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=self._environment(name), cwd=self.base, start_new_session=True)
        self._daemons.append((name, daemon))

    def status(self) -> dict | None:
        """The master's JSON status page, or None while it does not answer."""
        try:
            with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as response:
                return json.load(response)
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def _await(self, ready: Callable[[dict], bool], what: str, timeout_s: float) -> None:
        """Poll the master's status until ``ready`` holds; fail at once if a daemon exits."""
        def check() -> bool:
            for name, daemon in self._daemons:
                if daemon.poll() is not None:
                    raise ClusterError(f"the {name} exited with {daemon.returncode}\n"
                                       f"{self.log_tail()}")
            status = self.status()
            return status is not None and ready(status)

        if not poll(check, timeout_s):
            raise ClusterError(f"no {what} within {timeout_s:.0f} s at {self.web_url}: "
                               f"{self.status()}\n{self.log_tail()}")


def await_executors(spark, count: int, timeout_s: float = 180) -> None:
    """Wait until ``count`` executors have registered with the driver, so that the first job
    spreads over all of them rather than over whichever came up first."""
    tracker = spark.sparkContext._jsc.sc()

    def registered() -> int:  # the driver's block manager is in the map too
        return tracker.getExecutorMemoryStatus().size() - 1

    if not poll(lambda: registered() >= count, timeout_s):
        raise ClusterError(f"{registered()} of {count} executors registered in {timeout_s} s")
