"""Fixtures of the web tests: one server per database and test session, and HTTP clients."""

from __future__ import annotations

from datetime import timedelta

import pytest

pytest.importorskip("starlette")
httpx = pytest.importorskip("httpx2")

from .server import READ_ONLY_TOKEN, TOKEN, Server  # noqa: E402


@pytest.fixture(autouse=True)
def _one_target_per_server(request):
    """The mysql and mariadb targets reach one server through two dialect names, whose
    statements the conformance suite runs apart; the service runs on the mariadb one."""
    if "target" in request.fixturenames and request.getfixturevalue("target").database == "mysql":
        pytest.skip("the mariadb target runs the service on the same server")


@pytest.fixture(scope="session")
def server(backend_url, table_name):
    # the throughput is sampled often, so the dashboard's chart moves within a test
    started = Server(backend_url, table_name, history=True,
                     sample_every=timedelta(seconds=0.3)).start()
    yield started
    started.stop()


def _client(server, token):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=server.url, headers=headers, timeout=30)


@pytest.fixture
def http(server):
    """A client with the full token."""
    with _client(server, TOKEN) as client:
        yield client


@pytest.fixture
def reader(server):
    """A client with the read-only token."""
    with _client(server, READ_ONLY_TOKEN) as client:
        yield client


@pytest.fixture
def anonymous(server):
    with _client(server, None) as client:
        yield client
