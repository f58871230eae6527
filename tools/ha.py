"""Highly available database clusters of their own, on this machine: a PostgreSQL primary and
standby under Patroni with etcd, and a three-node MariaDB Galera cluster. The tests of
tests/ha/ start them in a temporary directory on free loopback ports, fail them over, and
destroy them; nothing here touches the machine's shared servers.

Every process is started here and ended here by its own id: etcd, each Patroni, each
PostgreSQL postmaster (Patroni starts it in a session of its own, so it is found through its
data directory's postmaster.pid), each mariadbd.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import sqlalchemy as sa

from .servers import (
    ServerMissing,
    create_test_database,
    free_port,
    install_mariadb,
    mariadb_options,
    mariadb_programs,
)


def _wait(condition, timeout: float, what: str):
    """Poll ``condition`` until it returns something true, and return that; TimeoutError
    naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if result := condition():
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


def _end(pid: int, sig: int = signal.SIGKILL, timeout: float = 30.0) -> None:
    """Send ``sig`` to process ``pid`` (one this module started) and wait until it is gone."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    _wait(lambda: not _alive(pid), timeout, f"process {pid} to end")


def _end_all_under(directory: str) -> None:
    """End every process whose command line names ``directory`` (the cluster's own temporary
    directory, so only processes started for it): a postmaster that its Patroni was starting
    as it was killed, a state transfer's rsync. Each by its id, until none is left."""
    def started_here() -> list[int]:
        pids = []
        for entry in glob.glob("/proc/[0-9]*/cmdline"):
            try:
                with open(entry, "rb") as f:
                    command = f.read()
            except OSError:
                continue
            pid = int(entry.split("/")[2])
            if directory.encode() in command and pid != os.getpid() and _alive(pid):
                pids.append(pid)
        return pids

    def ended() -> bool:
        for pid in started_here():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return not started_here()

    _wait(ended, 30, f"the processes of {directory} to end")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except OSError:
        return False


class Etcd:
    """One etcd member on loopback ports: Patroni's consensus store."""

    def __init__(self, directory: str) -> None:
        binary = shutil.which("etcd")
        if not binary:
            raise ServerMissing("etcd is not installed (Debian package etcd-server)")
        self.port, peer = free_port(), free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.log = open(f"{directory}/etcd.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [binary, "--name", "e0", "--data-dir", f"{directory}/etcd",
             "--listen-client-urls", f"http://{self.endpoint}",
             "--advertise-client-urls", f"http://{self.endpoint}",
             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"e0=http://127.0.0.1:{peer}"],
            stdout=self.log, stderr=subprocess.STDOUT)
        _wait(lambda: _http_json(f"http://{self.endpoint}/health") is not None, 30,
              "etcd to answer")

    def stop(self) -> None:
        _end(self.proc.pid)
        self.proc.wait()
        self.log.close()


def _http_json(url: str, data: dict | None = None) -> dict | list | None:
    """GET (or POST ``data`` to) ``url`` and return its JSON body; None when it cannot be
    reached or answers with an error status."""
    body = None if data is None else json.dumps(data).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=2) as r:
            return json.loads(r.read() or b"null")
    except (OSError, urllib.error.URLError, ValueError):
        return None


class PatroniCluster:
    """A PostgreSQL primary and ``replicas`` standbys (streaming replication), each under a
    Patroni, with one etcd. ``synchronous``: Patroni's synchronous mode, where a commit
    returns once a standby has it, and Patroni fails over only to that standby.

    Patroni is tuned to fail over within seconds: a one-second loop, a ten-second leader
    lease, and a crashed primary is failed over at once rather than restarted in place
    (``primary_start_timeout: 0``)."""

    def __init__(self, *, synchronous: bool = True, replicas: int = 1) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
        if not found:
            raise ServerMissing("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
        self.patroni = shutil.which("patroni")
        self.patronictl = shutil.which("patronictl")
        if not self.patroni or not self.patronictl:
            raise ServerMissing("Patroni is not installed (Debian package patroni)")
        self.bin = os.path.dirname(found[-1])
        self.dir = tempfile.mkdtemp(prefix="sqldelay-patroni-")
        self.user = "postgres" if os.geteuid() == 0 else None  # initdb refuses root
        if self.user:
            shutil.chown(self.dir, self.user)
        self.synchronous = synchronous
        self.names = [f"pg{i}" for i in range(1 + replicas)]
        self.pg_ports = {name: free_port() for name in self.names}
        self.api_ports = {name: free_port() for name in self.names}
        self.procs: dict[str, subprocess.Popen] = {}
        self.etcd: Etcd | None = None
        try:
            self.etcd = Etcd(self.dir)
            for name in self.names:  # the first bootstraps and leads; the others copy it
                self._start(name)
                if name == self.names[0]:
                    _wait(lambda: self.leader() == self.names[0], 60, "the first leader")
            self.wait_healthy()
        except BaseException:
            self.destroy()
            raise

    # ---- addresses ---------------------------------------------------------------------

    def url(self, driver: str = "psycopg") -> str:
        """A multi-host URL of the database ``postgres`` on every node, which connects to
        whichever is the primary (``target_session_attrs=read-write``)."""
        hosts = "&".join(f"host=127.0.0.1:{self.pg_ports[n]}" for n in self.names)
        return (f"postgresql+{driver}://postgres@/postgres?{hosts}"
                "&target_session_attrs=read-write")

    def node_url(self, name: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.pg_ports[name]}/postgres"

    # ---- state ---------------------------------------------------------------------------

    def members(self) -> list[dict]:
        """The members as Patroni's REST API lists them (name, role, state, lag), asked of
        any node that answers; [] when none does."""
        for name in self.names:
            got = _http_json(f"http://127.0.0.1:{self.api_ports[name]}/cluster")
            if isinstance(got, dict):
                return got.get("members", [])
        return []

    def leader(self) -> str | None:
        """The node that leads and runs as primary, or None (an election is under way)."""
        for member in self.members():
            if member.get("role") == "leader" and member.get("state") == "running":
                return member["name"]
        return None

    def healthy(self) -> bool:
        """A running leader, every other member streaming from it with no lag, and in
        synchronous mode one of them the synchronous standby.

        Patroni 3.0 (Debian 12's) reports a standby that has restored its base backup but
        not yet connected to the primary as "running" with lag 0, so streaming is read off
        the leader's own ``pg_stat_replication``."""
        members = self.members()
        leader = self.leader()
        if len(members) != len(self.names) or leader is None:
            return False
        standbys = [m for m in members if m.get("role") != "leader"]
        if any(m.get("state") not in ("running", "streaming") or m.get("lag") not in (0, "0")
               for m in standbys):
            return False
        if self.streaming_standbys(leader) < len(standbys):
            return False
        return not self.synchronous or any(m.get("role") == "sync_standby" for m in standbys)

    def streaming_standbys(self, name: str) -> int:
        """How many standbys stream from node ``name`` (its WAL senders in state
        streaming); 0 when it does not answer."""
        engine = sa.create_engine(self.node_url(name), poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as conn:
                return conn.exec_driver_sql("SELECT count(*) FROM pg_stat_replication"
                                            " WHERE state = 'streaming'").scalar_one()
        except sa.exc.DBAPIError:
            return 0
        finally:
            engine.dispose()

    def wait_healthy(self, timeout: float = 120) -> None:
        _wait(self.healthy, timeout, "the cluster to be healthy (a leader, standbys streaming)")

    def postmaster_pid(self, name: str) -> int | None:
        try:
            with open(f"{self.dir}/{name}/data/postmaster.pid") as f:
                pid = int(f.readline())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) else None

    # ---- failures --------------------------------------------------------------------------

    def kill_primary(self) -> str:
        """SIGKILL the primary's postmaster (its Patroni lives on, sees the crash, and hands
        the lead to the standby); returns the node that was primary."""
        name = self.leader()
        if name is None:
            raise RuntimeError("no primary to kill")
        pid = self.postmaster_pid(name)
        if pid is None:
            raise RuntimeError(f"the primary {name} has no running postmaster")
        os.kill(pid, signal.SIGKILL)
        return name

    def switchover(self) -> str:
        """A clean switchover with ``patronictl switchover`` to another node; returns the node
        that was primary."""
        leader = self.leader()
        candidate = next(n for n in self.names if n != leader)
        self._patronictl("switchover", "--leader", leader, "--candidate", candidate,
                         "--force")
        return leader

    def _patronictl(self, *args: str) -> str:
        done = subprocess.run([self.patronictl, "-c", f"{self.dir}/{self.names[0]}.yml",
                               *args], capture_output=True, text=True, user=self.user)
        if done.returncode:
            raise RuntimeError(f"patronictl {' '.join(args)} failed: "
                               f"{done.stdout.strip()} {done.stderr.strip()}")
        return done.stdout

    # ---- processes -------------------------------------------------------------------------

    def _start(self, name: str) -> None:
        config = {
            "scope": os.path.basename(self.dir),
            "namespace": "/sqldelay/",
            "name": name,
            "restapi": {"listen": f"127.0.0.1:{self.api_ports[name]}",
                        "connect_address": f"127.0.0.1:{self.api_ports[name]}"},
            "etcd3": {"hosts": [self.etcd.endpoint]},
            "bootstrap": {
                "dcs": {
                    "ttl": 10, "loop_wait": 1, "retry_timeout": 4,
                    "primary_start_timeout": 0,
                    "synchronous_mode": self.synchronous,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "parameters": {"wal_log_hints": "on", "max_wal_senders": 5,
                                       "max_replication_slots": 5, "fsync": "off",
                                       "max_connections": 200},
                    },
                },
                "initdb": [{"auth": "trust"}, {"encoding": "UTF8"}],
                "pg_hba": ["local all all trust", "host all all 127.0.0.1/32 trust",
                           "host replication all 127.0.0.1/32 trust"],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{self.pg_ports[name]}",
                "connect_address": f"127.0.0.1:{self.pg_ports[name]}",
                "data_dir": f"{self.dir}/{name}/data",
                "bin_dir": self.bin,
                "pgpass": f"{self.dir}/{name}/pgpass",
                "authentication": {"superuser": {"username": "postgres"},
                                   "replication": {"username": "postgres"}},
                "parameters": {"unix_socket_directories": self.dir},
            },
        }
        path = f"{self.dir}/{name}.yml"
        with open(path, "w") as f:
            json.dump(config, f)  # JSON is YAML
        os.makedirs(f"{self.dir}/{name}", mode=0o700)
        if self.user:
            shutil.chown(f"{self.dir}/{name}", self.user)
            shutil.chown(path, self.user)
        with open(f"{self.dir}/{name}.log", "wb") as log:
            self.procs[name] = subprocess.Popen([self.patroni, path], stdout=log,
                                                stderr=subprocess.STDOUT, user=self.user,
                                                cwd=self.dir)

    def destroy(self) -> None:
        """End every process of the cluster (Patroni first, so that none restarts its
        PostgreSQL) and remove its directory."""
        try:
            for proc in self.procs.values():
                _end(proc.pid)
                proc.wait()
            for name in self.names:
                pid = self.postmaster_pid(name)
                if pid is not None:  # an immediate shutdown: the backends go with it
                    _end(pid, signal.SIGQUIT)
            if self.etcd is not None:
                self.etcd.stop()
            _end_all_under(self.dir)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)



class GaleraCluster:
    """``size`` MariaDB servers replicating each other synchronously through Galera (the
    ``galera-4`` provider): every node takes writes, a transaction that conflicts with one
    committed on another node fails certification at commit (reported as a deadlock, 1213).
    The first node founds the cluster; the others join by state transfer (rsync). Debian's
    rsync transfer, run as root, writes as the user nobody: the joiners' data directories are
    given to it. A killed node is not restarted."""

    PROVIDER = "/usr/lib/galera/libgalera_smm.so"

    def __init__(self, size: int = 3) -> None:
        self.server = mariadb_programs()[1]
        if not os.path.exists(self.PROVIDER):
            raise ServerMissing(f"no Galera provider at {self.PROVIDER} (Debian package "
                                "galera-4)")
        self.dir = tempfile.mkdtemp(prefix="sqldelay-galera-")
        self.names = [f"g{i}" for i in range(size)]
        self.ports = {name: free_port() for name in self.names}
        self.gcomm = {name: free_port() for name in self.names}
        self.procs: dict[str, subprocess.Popen] = {}
        try:
            install_mariadb(f"{self.dir}/{self.names[0]}")
            os.chmod(self.dir, 0o755)
            for name in self.names[1:]:
                os.makedirs(f"{self.dir}/{name}/data")
                os.chmod(f"{self.dir}/{name}", 0o755)
                if os.geteuid() == 0:
                    shutil.chown(f"{self.dir}/{name}/data", "nobody")
            for name in self.names:
                self.start(name, bootstrap=name == self.names[0])
                if name == self.names[0]:
                    create_test_database(self.url(name))
        except BaseException:
            self.destroy()
            raise

    def url(self, name: str, driver: str = "pymysql") -> str:
        return f"mysql+{driver}://root@127.0.0.1:{self.ports[name]}/test"

    def status(self, name: str) -> dict[str, str]:
        """The node's wsrep status variables ({} when it cannot be reached)."""
        engine = sa.create_engine(self.url(name).replace("/test", "/"),
                                  poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as conn:
                return dict(conn.execute(sa.text("SHOW GLOBAL STATUS LIKE 'wsrep%'")).all())
        except sa.exc.DBAPIError:
            return {}
        finally:
            engine.dispose()

    def synced(self, name: str, size: int) -> bool:
        got = self.status(name)
        return (got.get("wsrep_local_state_comment") == "Synced"
                and got.get("wsrep_cluster_size") == str(size)
                and got.get("wsrep_ready") == "ON")

    def start(self, name: str, *, bootstrap: bool = False) -> None:
        """Start node ``name`` (the first, ``bootstrap``, founds the cluster) and wait until
        it is synced with the nodes running."""
        address = ",".join(f"127.0.0.1:{self.gcomm[n]}" for n in self.names)
        with open(f"{self.dir}/{name}.out", "wb") as out:
            self.procs[name] = subprocess.Popen(
                [self.server, *mariadb_options(f"{self.dir}/{name}"),
                 f"--socket={self.dir}/{name}.sock", f"--port={self.ports[name]}",
                 "--bind-address=127.0.0.1", f"--pid-file={self.dir}/{name}.pid",
                 f"--log-error={self.dir}/{name}.log", "--skip-log-bin",
                 "--innodb-buffer-pool-size=32M", "--innodb-flush-log-at-trx-commit=2",
                 "--binlog-format=ROW", "--innodb-autoinc-lock-mode=2",
                 "--wsrep-on=ON", f"--wsrep-provider={self.PROVIDER}",
                 "--wsrep-cluster-name=sqldelay", f"--wsrep-node-name={name}",
                 f"--wsrep-cluster-address=gcomm://{address}",
                 f"--wsrep-node-address=127.0.0.1:{self.gcomm[name]}",
                 f"--wsrep-node-incoming-address=127.0.0.1:{self.ports[name]}",
                 "--wsrep-provider-options="
                 f"gmcast.listen_addr=tcp://127.0.0.1:{self.gcomm[name]};"
                 f"ist.recv_addr=127.0.0.1:{free_port()};gcache.size=32M",
                 f"--wsrep-sst-receive-address=127.0.0.1:{free_port()}",
                 "--wsrep-sst-method=rsync", *(["--wsrep-new-cluster"] if bootstrap else [])],
                stdout=out, stderr=subprocess.STDOUT)
        running = sum(1 for n in self.names if n in self.procs and self.alive(n))
        _wait(lambda: self.synced(name, running) or not self.alive(name), 120,
              f"Galera node {name} to join (its log: {self.dir}/{name}.log)")
        if not self.alive(name):
            raise RuntimeError(f"Galera node {name} stopped: see {self.dir}/{name}.log")

    def alive(self, name: str) -> bool:
        return name in self.procs and self.procs[name].poll() is None

    def kill(self, name: str) -> None:
        """SIGKILL node ``name``: the others keep a majority and go on."""
        self.procs[name].kill()
        self.procs[name].wait()

    def destroy(self) -> None:
        try:
            for proc in self.procs.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            _end_all_under(self.dir)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
