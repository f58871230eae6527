"""create_app mounted under a prefix of another Starlette application: the API, the login and
its cookie, and the dashboard all live under the prefix; and the arguments it refuses."""

from __future__ import annotations

import socket

import pytest
import sqlalchemy as sa
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from sqldelay import create_schema
from sqldelay.engines import create_async_engine
from sqldelay.web import create_app

from .server import TOKEN


def test_mounted_under_a_prefix(tmp_path):
    url = f"sqlite:///{tmp_path / 'q.db'}"
    create_schema(sa.create_engine(url))
    inner = create_app(create_async_engine(url), token=TOKEN)
    app = Starlette(routes=[Mount("/queue", app=inner)])
    with TestClient(app, base_url="http://testserver") as client:
        assert client.get("/queue/v1/health").json()["status"] == "ok"  # open to probes
        assert client.get("/queue/v1/queues").status_code == 401
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert client.get("/queue/v1/queues", headers=auth).status_code == 200
        assert 'action="login"' in client.get("/queue/").text
        signed = client.post("/queue/login", content=f"token={TOKEN}",
                             headers={"Content-Type": "application/x-www-form-urlencoded"},
                             follow_redirects=False)
        assert signed.status_code == 303 and signed.headers["location"] == "/queue/"
        assert "Path=/queue/" in signed.headers["set-cookie"]
        assert 'name="csrf-token"' in client.get("/queue/").text
        assert client.get("/queue/v1/queues").json() == {"queues": [], "next_after": None}


def test_the_session_cookie_is_httponly_strict_and_secure_over_https(tmp_path):
    url = f"sqlite:///{tmp_path / 'q.db'}"
    create_schema(sa.create_engine(url))
    app = create_app(create_async_engine(url), token=TOKEN)
    for base, secure in (("http://testserver", False), ("https://testserver", True)):
        with TestClient(app, base_url=base) as client:
            signed = client.post("/login", data={"token": TOKEN}, follow_redirects=False)
            cookie = signed.headers["set-cookie"]
            assert "HttpOnly" in cookie and "SameSite=strict" in cookie, cookie
            assert ("Secure" in cookie) is secure, cookie
            assert TOKEN not in cookie


def test_refused_arguments(tmp_path):
    engine = create_async_engine(f"sqlite:///{tmp_path / 'q.db'}")
    with pytest.raises(TypeError, match="AsyncEngine"):
        create_app(sa.create_engine("sqlite://"), token=TOKEN)
    with pytest.raises(ValueError, match="at least 16"):
        create_app(engine, token="short")
    with pytest.raises(ValueError, match="must differ"):
        create_app(engine, token=TOKEN, read_only_token=TOKEN)
    with pytest.raises(ValueError, match="whitespace"):
        create_app(engine, token=TOKEN + " x")
    with pytest.raises(ValueError, match="max_body"):
        create_app(engine, token=TOKEN, max_body=0)


def test_an_unreachable_database_is_a_503_in_json():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    engine = create_async_engine(f"postgresql+asyncpg://postgres@127.0.0.1:{port}/none")
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with TestClient(create_app(engine, token=TOKEN)) as client:
        for path in ("/v1/queues", "/v1/queues/q/messages/k", "/v1/health"):
            r = client.get(path, headers=auth)
            assert r.status_code == 503, r.text
        r = client.put("/v1/queues/q/messages/k", headers=auth, json={"payload": 1})
        assert (r.status_code, r.json()["error"]["code"]) == (503, "database_unavailable")
