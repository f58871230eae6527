"""``sqldelay serve`` as a user runs it: a token from a file or the environment (never an
argument), a public address refused without one, a one-line error for a missing table."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
import sqlalchemy as sa

httpx = pytest.importorskip("httpx2")

from sqldelay.cli.serve import is_loopback  # noqa: E402

from .server import TOKEN  # noqa: E402


def sqldelay(*args, env=None, **kwargs):
    return subprocess.Popen([sys.executable, "-m", "sqldelay.cli", *args],
                            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serves_with_the_token_of_a_file(backend_url, table_name, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    port = free_port()
    proc = sqldelay("serve", "--url", backend_url, "--table", table_name, "--port", str(port),
                    "--token-file", str(token_file))
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/v1/health",
                              headers={"Authorization": f"Bearer {TOKEN}"})
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "sqldelay serve did not answer"
                time.sleep(0.1)
        assert r.json() == {"status": "ok", "database": "ok"}
        assert httpx.get(f"http://127.0.0.1:{port}/v1/queues").status_code == 401
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_serve_bounds_the_connections_it_serves_at_once(backend_url, table_name):
    """With --max-connections 4 and four connections open, a fifth client gets 503 at once
    (not a wait, not the memory of one more client); once they close, it is served."""
    port = free_port()
    proc = sqldelay("serve", "--url", backend_url, "--table", table_name, "--port", str(port),
                    "--max-connections", "4", env={"SQLDELAY_TOKEN": TOKEN})
    auth = {"Authorization": f"Bearer {TOKEN}"}
    health = f"http://127.0.0.1:{port}/v1/health"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()
            try:
                httpx.get(health, headers=auth)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "sqldelay serve did not answer"
                time.sleep(0.1)
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
        try:
            deadline = time.monotonic() + 30
            while (r := httpx.get(health, headers=auth)).status_code != 503:
                assert time.monotonic() < deadline, "a fifth connection was served"
                time.sleep(0.05)
        finally:
            for sock in held:
                sock.close()
        deadline = time.monotonic() + 30
        while (r := httpx.get(health, headers=auth)).status_code == 503:
            assert time.monotonic() < deadline, "the closed connections still count"
            time.sleep(0.05)
        assert r.json() == {"status": "ok", "database": "ok"}
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


@pytest.mark.parametrize("host", ["0.0.0.0", "example.com"])
def test_a_public_address_needs_a_token(host, tmp_path):
    proc = sqldelay("serve", "--url", f"sqlite:///{tmp_path}/q.db", "--host", host,
                    env={"SQLDELAY_TOKEN": ""})
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert err.strip() == (f"sqldelay serve: error: refusing to bind {host} without a token; "
                           "give --token-file or $SQLDELAY_TOKEN")


def test_bad_tokens_and_a_missing_table_are_one_line_errors(tmp_path):
    sa.create_engine(f"sqlite:///{tmp_path}/q.db").connect().close()  # a database, no table
    short = tmp_path / "short"
    short.write_text("abc")
    cases = [(["--token-file", str(tmp_path / "absent")], {}, "cannot read --token-file"),
             (["--token-file", str(short)], {}, "the token must be a string of at least 16"),
             ([], {"SQLDELAY_TOKEN": TOKEN}, "the queue table 'absent' does not exist")]
    for args, env, expected in cases:
        proc = sqldelay("serve", "--url", f"sqlite:///{tmp_path}/q.db", *args,
                        "--table", "absent", env=env)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 1
        assert len(err.strip().splitlines()) == 1 and expected in err, err


def test_which_addresses_are_loopback():
    assert all(map(is_loopback, ["127.0.0.1", "127.8.9.1", "::1", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "10.0.0.1", "example.com", ""]))
