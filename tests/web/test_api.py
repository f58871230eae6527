"""The REST API through a real uvicorn server, on every database: each endpoint, each error,
and that a refused request writes nothing. What is checked through the library (a blocking
DelayedQueue on the same table) is what a user would see there."""

from __future__ import annotations

import json
import re
import socket
import time
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

from sqldelay import DeadLetters, DelayedQueue, FakeClock, create_schema
from sqldelay.engines import create_async_engine
from sqldelay.tracing import Tracer
from sqldelay.web import create_app
from sqldelay.worker_base import error_text

from ..conftest import unique_name
from .server import TOKEN, Server

httpx = pytest.importorskip("httpx2")


@pytest.fixture
def q(engine, table_name):
    """The library's view of a fresh queue on the server's table."""
    return DelayedQueue(engine, unique_name("web"), table_name=table_name)


def url(q, key=None):
    base = f"/v1/queues/{q.name}/messages"
    return base if key is None else f"{base}/{key}"


def when(text):
    return datetime.fromisoformat(text)


def test_put_creates_once_post_updates_delete_removes(http, q):
    r = http.put(url(q, "a"), json={"payload": {"n": 1}, "delay": 3600})
    assert (r.status_code, r.json()) == (201, {"queue": q.name, "key": "a",
                                               "outcome": "created"})
    r = http.put(url(q, "a"), json={"payload": {"n": 2}})
    assert (r.status_code, r.json()["outcome"]) == (200, "ignored")
    assert q.get("a").payload == {"n": 1}  # PUT never replaces

    r = http.post(url(q, "a"), json={"payload": {"n": 3}, "delay": "PT2H", "priority": 5})
    assert (r.status_code, r.json()["outcome"]) == (200, "updated")
    stored = q.get("a")
    assert (stored.payload, stored.priority) == ({"n": 3}, 5)
    same = {"payload": {"n": 3}, "at": stored.scheduled_at.isoformat(), "priority": 5}
    assert http.post(url(q, "a"), json=same).json()["outcome"] == "ignored"
    r = http.post(url(q, "b/with/slashes"), json={"payload": [1, 2], "group": "g"})
    assert (r.status_code, r.json()["outcome"]) == (201, "created")
    assert q.get("b/with/slashes").group == "g"

    assert http.delete(url(q, "a")).status_code == 204
    assert q.get("a") is None
    r = http.delete(url(q, "a"))
    assert (r.status_code, r.json()["error"]["code"]) == (404, "not_found")


def test_due_times_from_at_and_delay(http, q):
    http.put(url(q, "at"), json={"payload": 1, "at": "2031-05-06T07:08:09.250+02:00"})
    assert q.get("at").scheduled_at == datetime(2031, 5, 6, 5, 8, 9, 250000, tzinfo=UTC)
    # The service counts from the database's time, which it reads through an offset to this
    # machine's clock measured to within half a round trip to the server: on a loaded
    # machine, milliseconds to tens of them. The slack, well under the shortest delay here,
    # still tells seconds from milliseconds or a delay from none.
    slack = timedelta(milliseconds=200)
    for key, delay, seconds in (("n", 90, 90), ("f", 0.5, 0.5), ("iso", "P1DT2H3M4.5S",
                                                                 93784.5)):
        before = datetime.now(UTC)
        assert http.put(url(q, key), json={"payload": 1, "delay": delay}).status_code == 201
        after = datetime.now(UTC)
        due = q.get(key).scheduled_at
        assert (before + timedelta(seconds=seconds) - slack <= due
                <= after + timedelta(seconds=seconds) + slack)
    before = datetime.now(UTC)
    http.put(url(q, "now"), json={"payload": 1})
    assert before - slack <= q.get("now").scheduled_at <= datetime.now(UTC) + slack


def test_status_follows_the_message_through_its_states(http, engine, table_name, q):
    assert http.get(url(q, "k")).status_code == 404
    http.put(url(q, "k"), json={"payload": {"a": 1}, "delay": 3600})
    status = http.get(url(q, "k")).json()
    assert (status["state"], status["payload"], status["attempt"]) == ("scheduled",
                                                                        {"a": 1}, 0)
    assert when(status["due_at"]) == q.get("k").scheduled_at

    http.post(url(q, "k"), json={"payload": {"a": 2}})
    assert http.get(url(q, "k")).json()["state"] == "due"

    env = q.poll(by="consumer-7")
    status = http.get(url(q, "k")).json()
    assert (status["state"], status["attempt"]) == ("in_flight", 1)
    assert when(status["locked_until"]) == when(status["due_at"]) == env.locked_until
    assert when(status["scheduled_at"]) == env.scheduled_at

    env.release(delay=timedelta(hours=1), error="retry later")  # waits for its retry
    status = http.get(url(q, "k")).json()
    assert (status["state"], status["locked_until"]) == ("scheduled", None)
    assert when(status["due_at"]) - datetime.now(UTC) > timedelta(minutes=59)
    listed = http.get(url(q), params={"state": "scheduled"}).json()["messages"]
    assert [(m["key"], m["state"]) for m in listed] == [("k", "scheduled")]
    assert q.poll() is None
    http.post(url(q, "k"), json={"payload": {"a": 2}})  # due now again
    env = q.poll(by="consumer-7")

    DeadLetters.of(q).bury(env, "RuntimeError: boom")
    status = http.get(url(q, "k")).json()
    assert (status["state"], status["attempts"], status["payload"]) == ("dead_lettered", 1,
                                                                        {"a": 2})
    assert status["last_error"] == "RuntimeError: boom"


def test_a_batch_answers_in_order_and_is_all_or_nothing(http, q):
    body = {"messages": [{"key": "a", "payload": 1}, {"key": "b", "payload": 2, "delay": 60},
                         {"key": "a", "payload": 3}, {"key": "c", "payload": 4,
                                                      "update": False}]}
    r = http.post(url(q), json=body)
    assert (r.status_code, r.json()["outcomes"]) == (201, ["created", "created", "updated",
                                                           "created"])
    assert q.get("a").payload == 3
    # 201 as soon as one message was created, as a single create answers; 200 when none was
    r = http.post(url(q), json={"messages": [{"key": "c", "payload": 9, "update": False},
                                             {"key": "d", "payload": 1}]})
    assert (r.status_code, r.json()["outcomes"]) == (201, ["ignored", "created"])
    r = http.post(url(q), json={"messages": [{"key": "c", "payload": 9, "update": False},
                                             {"key": "d", "payload": 2}]})
    assert (r.status_code, r.json()["outcomes"]) == (200, ["ignored", "updated"])

    bad = {"messages": [{"key": "e", "payload": 1}, {"key": "f", "payload": 2,
                                                     "at": "2030-01-01T00:00:00"}]}
    r = http.post(url(q), json=bad)
    assert r.status_code == 400
    assert r.json()["error"] | {"message": ""} == {"code": "naive_timestamp",
                                                   "field": "messages[1].at", "message": ""}
    assert q.get("e") is None

    too_many = {"messages": [{"key": f"k{i}", "payload": i} for i in range(1001)]}
    r = http.post(url(q), json=too_many)
    assert (r.status_code, r.json()["error"]["code"]) == (400, "batch_too_large")
    assert q.get("k0") is None


BAD_OFFERS = [
    # (what, key, body as text, status, code, field)
    ("malformed JSON", "k", '{"payload": ', 400, "malformed_json", "body"),
    ("NaN", "k", '{"payload": NaN}', 400, "malformed_json", "body"),
    ("no body", "k", "", 400, "missing_body", "body"),
    ("not an object", "k", "[1]", 400, "not_an_object", "body"),
    ("missing payload", "k", '{"delay": 1}', 400, "missing_field", "payload"),
    ("unknown field", "k", '{"payload": 1, "dealy": 1}', 400, "unknown_field", "dealy"),
    ("naive timestamp", "k", '{"payload": 1, "at": "2030-01-01T10:00:00"}', 400,
     "naive_timestamp", "at"),
    ("not a timestamp", "k", '{"payload": 1, "at": "tomorrow"}', 400, "invalid_timestamp",
     "at"),
    ("negative delay", "k", '{"payload": 1, "delay": -1}', 400, "negative_delay", "delay"),
    ("negative duration", "k", '{"payload": 1, "delay": "-PT1S"}', 400, "negative_delay",
     "delay"),
    ("months", "k", '{"payload": 1, "delay": "P1M"}', 400, "invalid_delay", "delay"),
    ("endless delay", "k", '{"payload": 1, "delay": 1e300}', 400, "invalid_delay", "delay"),
    ("both", "k", '{"payload": 1, "at": "2030-01-01T10:00:00Z", "delay": 1}', 400,
     "conflicting_fields", "delay"),
    ("priority", "k", '{"payload": 1, "priority": 1.5}', 400, "invalid", "priority"),
    ("empty group", "k", '{"payload": 1, "group": ""}', 400, "invalid", "group"),
    ("long key", "k" * 201, '{"payload": 1}', 400, "invalid_key", "key"),
    ("NUL in key", "a%00b", '{"payload": 1}', 400, "invalid_key", "key"),
    ("lone surrogate", "k", '{"payload": "\\ud800"}', 400, "invalid_payload", "payload"),
    # due times a datetime cannot hold once in UTC: stored, every read of them failed (500)
    ("before year 1 in UTC", "p", '{"payload": 1, "at": "0001-01-01T00:00:00+14:00"}', 400,
     "invalid_timestamp", "at"),
    ("after year 9999 in UTC", "p", '{"payload": 1, "at": "9999-12-31T23:00:00-05:00"}',
     400, "invalid_timestamp", "at"),
    ("delay past year 9999", "k", '{"payload": 1, "delay": "P3000000D"}', 400,
     "invalid_delay", "delay"),
    ("4,000-digit delay", "k", '{"payload": 1, "delay": 1' + "0" * 3999 + "}", 400,
     "invalid_delay", "delay"),
    ("5,000-digit delay", "k", '{"payload": 1, "delay": 1' + "0" * 4999 + "}", 400,
     "malformed_json", "body"),
    ("Arabic-Indic digits", "k", '{"payload": 1, "delay": "PT\u0661\u0662S"}', 400,
     "invalid_delay", "delay"),
    ("nested 1,000 deep", "k", '{"payload": ' + "[" * 1000 + "]" * 1000 + "}", 400,
     "too_deep", "body"),
    ("nested 100,000 deep", "k", '{"payload": ' + "[" * 100_000 + "]" * 100_000 + "}", 400,
     "too_deep", "body"),
    ("nested 257 deep", "k", '{"payload": ' + "[" * 256 + "]" * 256 + "}", 400, "too_deep",
     "body"),
]


@pytest.mark.parametrize(("what", "key", "body", "status", "code", "field"), BAD_OFFERS,
                         ids=[b[0] for b in BAD_OFFERS])
def test_bad_offers_are_refused_naming_the_field_and_write_nothing(http, q, what, key, body,
                                                                   status, code, field):
    for method in ("PUT", "POST"):
        r = http.request(method, url(q, key), content=body.encode())
        assert r.status_code == status, r.text
        error = r.json()["error"]
        assert (error["code"], error["field"]) == (code, field)
        assert error["message"]
    stats = q.stats()
    assert stats.due + stats.scheduled + stats.in_flight == 0


def test_a_body_nested_to_the_limit_is_stored_and_read_back(http, q):
    deepest = [[]]  # 256 levels with the message's object
    for _ in range(253):
        deepest = [deepest]
    assert http.put(url(q, "deep"), json={"payload": deepest}).status_code == 201
    r = http.get(url(q, "deep"))
    assert (r.status_code, r.json()["payload"]) == (200, deepest)
    assert q.get("deep").payload == deepest
    batch = {"messages": [{"key": "deeper", "payload": [deepest]}]}
    r = http.post(url(q), json=batch)
    assert (r.status_code, r.json()["error"]["code"]) == (400, "too_deep")


def test_keys_that_differ_only_in_bytes_that_are_not_utf8_are_refused_not_merged(http, q):
    # the server decodes a bad byte as U+FFFD: a%ffb and a%feb would both be "a\ufffdb"
    for method in ("PUT", "POST", "GET", "DELETE"):
        for key in ("a%ffb", "a%feb", "%c3"):
            r = http.request(method, url(q, key), json={"payload": 1})
            assert r.status_code == 400, (method, key, r.text)
            assert (r.json()["error"]["code"], r.json()["error"]["field"]) == (
                "invalid_encoding", "path")
    assert q.get("a\ufffdb") is None
    r = http.get(url(q) + "?prefix=a%ffb")
    assert (r.status_code, r.json()["error"]["field"]) == (400, "query")
    # UTF-8, percent-encoded, is a key like any other
    assert http.put(url(q, "a%C3%A9b"), json={"payload": 1}).status_code == 201
    assert q.get("a\u00e9b").payload == 1
    assert http.get(url(q) + "?prefix=a%C3%A9").json()["messages"][0]["key"] == "a\u00e9b"


def test_query_numbers_are_ascii_digits(http, q):
    for path in (url(q), f"/v1/queues/{q.name}/dead-letters"):
        r = http.get(path, params={"limit": "\u0661\u0662"})  # 12 in Arabic-Indic digits
        assert (r.status_code, r.json()["error"]["code"], r.json()["error"]["field"]) == (
            400, "invalid_parameter", "limit"), path
        assert http.get(path, params={"limit": "12"}).status_code == 200


def test_a_request_that_finds_no_free_connection_in_time_is_a_503(backend_url, table_name):
    """With every connection of the service's pool taken (by requests waiting on a locked
    table, here by the test itself), a request waits the pool's timeout and gets 503 in the
    service's error shape; once a connection is free, requests are served again."""
    pool = {"poolclass": sa.pool.AsyncAdaptedQueuePool, "pool_size": 1, "max_overflow": 0,
            "pool_timeout": 0.5}
    server = Server(backend_url, table_name, engine_kwargs=pool,
                    sample_every=timedelta(hours=1)).start()
    try:
        engine = server.app.state.service.engine
        deadline = time.monotonic() + 30
        while True:  # the throughput sampler may hold the connection a moment
            try:
                held = server.call(engine.connect().start())
                break
            except sa.exc.TimeoutError:
                assert time.monotonic() < deadline, "the pool's connection never came free"
        with httpx.Client(base_url=server.url, timeout=30,
                          headers={"Authorization": f"Bearer {TOKEN}"}) as client:
            path = f"/v1/queues/{unique_name('web')}/messages/k"
            r = client.get(path)
            assert r.status_code == 503, r.text
            assert r.json()["error"]["code"] == "database_unavailable"
            assert "pool" in r.json()["error"]["message"]
            server.call(held.close())
            assert client.get(path).status_code == 404  # served again: no such message
    finally:
        server.stop()


def test_a_queue_name_the_library_refuses_is_a_400(http):
    r = http.put(f"/v1/queues/{'q' * 61}/messages/k", json={"payload": 1})
    assert (r.status_code, r.json()["error"]["code"], r.json()["error"]["field"]) == (
        400, "invalid_queue", "queue")


def test_a_body_over_the_limit_is_refused_before_it_is_read_whole(http, q):
    big = b'{"payload": "' + b"x" * (1024 * 1024) + b'"}'
    r = http.put(url(q, "k"), content=big)
    assert (r.status_code, r.json()["error"]["code"]) == (413, "body_too_large")

    def chunks():  # no Content-Length: the limit holds while the body streams in
        yield big[:1000]
        yield big[1000:]

    r = http.put(url(q, "k"), content=chunks())
    assert (r.status_code, r.json()["error"]["code"]) == (413, "body_too_large")
    assert q.get("k") is None


def test_a_body_that_arrives_too_slowly_is_a_408_and_writes_nothing(backend_url, table_name):
    """A client dripping its body byte by byte is answered 408 (in the service's error
    shape) once the body timeout has passed since the request began, and its connection is
    closed; the same for the login form's body."""
    server = Server(backend_url, table_name, sample_every=timedelta(hours=1),
                    body_timeout=timedelta(seconds=1)).start()
    queue = unique_name("web")
    try:
        port = int(server.url.rsplit(":", 1)[1])
        for head in (f"PUT /v1/queues/{queue}/messages/k HTTP/1.1\r\n"
                     f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n",
                     "POST /login HTTP/1.1\r\n"
                     "Content-Type: application/x-www-form-urlencoded\r\n"):
            body = b'{"payload": "' + b"x" * 200 + b'"}'
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
                sock.sendall(f"{head}Host: 127.0.0.1\r\nContent-Length: {len(body)}\r\n"
                             "\r\n".encode())
                answer = b""
                deadline = time.monotonic() + 30
                for byte in body:  # one byte per 0.2 s at most: 40 s for the whole body
                    assert time.monotonic() < deadline, "no answer to a slow body"
                    sock.sendall(bytes([byte]))
                    try:
                        answer = sock.recv(65536)  # waits up to 0.2 s
                        break  # the answer came: no more bytes for a closing connection
                    except TimeoutError:
                        continue
                sock.settimeout(30)
                try:
                    while chunk := sock.recv(65536):  # to the end: the server closes it
                        answer += chunk
                except ConnectionResetError:  # closed with the dripped bytes unread
                    pass
            status, _, rest = answer.partition(b"\r\n")
            assert status == b"HTTP/1.1 408 Request Timeout", answer
            headers, _, content = rest.partition(b"\r\n\r\n")
            assert b"connection: close" in headers.lower()
            assert json.loads(content)["error"]["code"] == "body_timeout"
        with httpx.Client(base_url=server.url, timeout=30,
                          headers={"Authorization": f"Bearer {TOKEN}"}) as client:
            assert client.get(f"/v1/queues/{queue}/messages/k").status_code == 404
            r = client.put(f"/v1/queues/{queue}/messages/k", json={"payload": 1})
            assert r.status_code == 201  # a body in time is served as before
    finally:
        server.stop()


def test_queues_and_their_counts(http, q):
    q.offer("due", 1)
    q.offer("later", 1, at=datetime.now(UTC) + timedelta(hours=1))
    q.offer("taken", 1, at=datetime.now(UTC) - timedelta(seconds=5))
    q.poll()  # takes "taken", the earliest due
    listed = {s["queue"]: s for s in http.get("/v1/queues",
                                              params={"prefix": q.name}).json()["queues"]}
    mine = listed[q.name]
    assert (mine["due"], mine["scheduled"], mine["in_flight"], mine["dead_letters"],
            mine["payload_type"]) == (1, 1, 1, 0, "json")
    one = http.get(f"/v1/queues/{q.name}").json()
    assert (one["due"], one["scheduled"], one["in_flight"], one["paused"]) == (1, 1, 1, False)
    assert one["oldest_due_age_seconds"] >= 0


def test_the_queue_list_comes_a_page_at_a_time(http, engine, table_name):
    """However many queues the table holds, one answer holds at most ``limit`` of them (50
    by default); ``next_after`` reads the next page, each queue comes once."""
    base = unique_name("many")
    names = [f"{base}_{i:02}" for i in range(51)]
    for name in names:
        DelayedQueue(engine, name, table_name=table_name).offer("k", 1)
    first = http.get("/v1/queues", params={"prefix": base}).json()
    assert len(first["queues"]) == 50 and first["next_after"] is not None
    seen, after = [], None
    while True:
        params = {"prefix": base, "limit": 20}
        if after:
            params["after"] = after
        page = http.get("/v1/queues", params=params).json()
        assert len(page["queues"]) <= 20
        seen += [s["queue"] for s in page["queues"]]
        after = page["next_after"]
        if after is None:
            break
    assert seen == names  # in the database's order of the name, here that of the digits
    for params, field in (({"limit": "0"}, "limit"), ({"limit": "501"}, "limit"),
                          ({"after": "a\x00b"}, "after"), ({"prefix": "p" * 61}, "prefix")):
        r = http.get("/v1/queues", params=params)
        assert (r.status_code, r.json()["error"]["field"]) == (400, field), params


def test_browse_by_state_and_prefix_page_by_page(http, q):
    later = datetime.now(UTC) + timedelta(hours=1)
    for i in range(5):
        q.offer(f"user:{i}", i)
    q.offer("other", 9)
    q.offer("user:later", 1, at=later)
    seen, after = [], None
    while True:
        params = {"state": "due", "prefix": "user:", "limit": 2}
        if after:
            params["after"] = after
        page = http.get(url(q), params=params).json()
        seen += [m["key"] for m in page["messages"]]
        after = page["next_after"]
        if after is None:
            break
    assert seen == [f"user:{i}" for i in range(5)]
    scheduled = http.get(url(q), params={"state": "scheduled"}).json()["messages"]
    assert [m["key"] for m in scheduled] == ["user:later"]
    for params, field in (({"state": "dead"}, "state"), ({"limit": "0"}, "limit"),
                          ({"after": "nonsense"}, "after"), ({"after": "١:٢"}, "after"),
                          ({"after": " 1:2"}, "after"), ({"after": "1_0:2"}, "after")):
        r = http.get(url(q), params=params)
        assert (r.status_code, r.json()["error"]["field"]) == (400, field)


def test_dead_letters_list_requeue_and_drop(http, q, engine, table_name):
    other = DelayedQueue(engine, unique_name("web"), table_name=table_name)
    for key in ("a", "b", "c", "d"):
        q.offer(key, {"k": key})
        DeadLetters.of(q).bury(q.poll(), f"failed {key}")
    other.offer("x", 1)
    DeadLetters.of(other).bury(other.poll(), "failed x")
    base = f"/v1/queues/{q.name}/dead-letters"
    page = http.get(base, params={"limit": 3}).json()
    assert ([d["key"] for d in page["dead_letters"]], page["total"]) == (["a", "b", "c"], 4)
    rest = http.get(base, params={"limit": 3, "offset": 3}).json()["dead_letters"]
    assert [d["key"] for d in rest] == ["d"]
    ids = {d["key"]: d["id"] for d in page["dead_letters"] + rest}

    assert http.post(base + "/requeue", json={"ids": [ids["a"]]}).json() == {"requeued": 1}
    assert q.get("a").payload == {"k": "a"}
    assert http.post(base + "/drop", json={"ids": [ids["b"], ids["c"]]}).json() == {
        "dropped": 2}
    other_id = DeadLetters.of(other).ids(other.name)[0]
    for body, status, code in (({"ids": [other_id]}, 404, "not_found"),
                               ({"ids": []}, 400, "invalid_selection"),
                               ({"ids": ["1"]}, 400, "invalid_selection"),
                               ({"all": False}, 400, "invalid_selection"),
                               ({}, 400, "invalid_selection")):
        r = http.post(base + "/drop", json=body)
        assert (r.status_code, r.json()["error"]["code"]) == (status, code), body
    assert DeadLetters.of(other).count(other.name) == 1
    assert http.post(base + "/requeue", json={"all": True}).json() == {"requeued": 1}
    assert q.contains("d") and http.get(base).json()["total"] == 0


def test_pause_and_resume(http, q):
    q.offer("k", 1)
    r = http.post(f"/v1/queues/{q.name}/pause")
    assert (r.status_code, r.json()["paused"]) == (200, True)
    assert q.flow_control().paused and q.poll() is None
    assert http.post(f"/v1/queues/{q.name}/resume").json()["paused"] is False
    assert q.poll().key == "k"


def test_health_and_unknown_routes(http, anonymous):
    assert http.get("/v1/health").json() == {"status": "ok", "database": "ok"}
    # for load balancers: no token needed, and a wrong one neither refused nor counted
    for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"}):
        r = anonymous.get("/v1/health", headers=headers)
        assert (r.status_code, r.json()) == (200, {"status": "ok", "database": "ok"})
        assert anonymous.head("/v1/health", headers=headers).status_code == 200
    r = http.get("/v1/nothing-here")
    assert (r.status_code, r.json()["error"]["code"]) == (404, "not_found")
    r = http.delete("/v1/queues")
    assert (r.status_code, r.json()["error"]["code"]) == (405, "method_not_allowed")


def test_tokens(anonymous, reader, http, server, q):
    for client, token in ((anonymous, None), (anonymous, "wrong-token-0123456789"),
                          (anonymous, "admin-token-0123456788")):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        for method, path in (("GET", "/v1/queues"), ("GET", "/v1/openapi.json"),
                             ("PUT", url(q, "k")), ("GET", url(q, "k") + "/history"),
                             ("PUT", f"/v1/queues/{q.name}/rate-limit")):
            r = client.request(method, path, headers=headers, json={"payload": 1})
            assert (r.status_code, r.json()["error"]["code"]) == (401, "unauthorized")
            assert r.headers["www-authenticate"] == "Bearer"
    assert reader.get("/v1/queues").status_code == 200
    for method, path in (("PUT", url(q, "k")), ("POST", url(q, "k")), ("DELETE", url(q, "k")),
                         ("POST", url(q)), ("POST", f"/v1/queues/{q.name}/pause"),
                         ("PUT", f"/v1/queues/{q.name}/rate-limit"),
                         ("DELETE", f"/v1/queues/{q.name}/rate-limit"),
                         ("PUT", f"/v1/queues/{q.name}/concurrency-limit"),
                         ("DELETE", f"/v1/queues/{q.name}/concurrency-limit")):
        r = reader.request(method, path, json={"payload": 1, "limit": 1})
        assert (r.status_code, r.json()["error"]["code"]) == (403, "read_only")
    assert q.get("k") is None and not q.flow_control().paused
    assert reader.get(url(q, "k") + "/history").status_code == 404  # reads are the reader's


def csrf_of(client):
    """The CSRF token the dashboard's page gives the signed-in browser."""
    return re.search(r'name="csrf-token" content="([^"]*)"', client.get("/").text).group(1)


def test_the_session_cookie_needs_the_csrf_token_and_this_origin_for_changes(anonymous,
                                                                            server, q):
    page = anonymous.post("/login", data={"token": TOKEN})
    assert page.status_code == 303
    cookies = dict(anonymous.cookies)
    assert cookies  # the session
    assert anonymous.get("/v1/queues").status_code == 200  # reads need the cookie alone
    csrf = csrf_of(anonymous)
    assert csrf
    body = {"payload": 1}
    r = anonymous.put(url(q, "k"), json=body)
    assert (r.status_code, r.json()["error"]["code"]) == (403, "csrf")
    for headers in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"},
                    {"Sec-Fetch-Site": "same-site"}):
        r = anonymous.put(url(q, "k"), json=body, headers={"X-CSRF-Token": csrf, **headers})
        assert (r.status_code, r.json()["error"]["code"]) == (403, "cross_origin"), headers
    assert q.get("k") is None
    r = anonymous.put(url(q, "k"), json=body, headers={"X-CSRF-Token": csrf,
                                                       "Origin": server.url,
                                                       "Sec-Fetch-Site": "same-origin"})
    assert r.status_code == 201
    assert anonymous.post("/login", data={"token": "nope"}).status_code == 401


def test_the_session_cookie_holds_no_token_and_signing_out_revokes_it(anonymous, server):
    assert anonymous.post("/login", data={"token": TOKEN}).status_code == 303
    session = anonymous.cookies["sqldelay_session"]
    assert TOKEN not in session and len(session) >= 32
    csrf = csrf_of(anonymous)
    with httpx.Client(base_url=server.url, timeout=30) as copy:  # the cookie, copied
        copy.cookies.set("sqldelay_session", session)
        assert copy.get("/v1/queues").status_code == 200
        r = anonymous.post("/logout", data={"csrf": csrf})
        assert (r.status_code, r.headers["location"]) == (303, "/")
        r = copy.get("/v1/queues")
        assert (r.status_code, r.json()["error"]["code"]) == (401, "unauthorized")
        assert 'name="token"' in copy.get("/").text  # the login form again
    assert anonymous.get("/v1/queues").status_code == 401


def test_sign_out_and_sign_in_from_another_site_are_refused(anonymous, server):
    assert anonymous.post("/login", data={"token": TOKEN}).status_code == 303
    csrf = csrf_of(anonymous)
    for headers in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
        r = anonymous.post("/logout", data={"csrf": csrf}, headers=headers)
        assert (r.status_code, r.json()["error"]["code"]) == (403, "cross_origin"), headers
        r = anonymous.post("/login", data={"token": TOKEN}, headers=headers)
        assert (r.status_code, r.json()["error"]["code"]) == (403, "cross_origin"), headers
    r = anonymous.post("/logout", data={"csrf": "forged"})
    assert (r.status_code, r.json()["error"]["code"]) == (403, "csrf")
    assert anonymous.get("/v1/queues").status_code == 200  # still signed in
    r = anonymous.post("/logout", data={"csrf": csrf}, headers={"Origin": server.url,
                                                                "Sec-Fetch-Site": "same-origin"})
    assert r.status_code == 303
    assert anonymous.get("/v1/queues").status_code == 401


def test_wrong_tokens_from_one_address_are_slowed_down(backend_url, table_name):
    """After 20 wrong tokens at once, an address waits (429, Retry-After) before any token
    of its is read again, the right one included, at the API and at the login alike; the
    wait is seconds, after which the right token works."""
    server = Server(backend_url, table_name, sample_every=timedelta(hours=1)).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            wrong = {"Authorization": "Bearer wrong-token-0123456789"}
            for _ in range(20):
                assert client.get("/v1/queues", headers=wrong).status_code == 401
            r = client.get("/v1/queues", headers=wrong)
            assert (r.status_code, r.json()["error"]["code"]) == (429, "too_many_attempts")
            assert 1 <= int(r.headers["retry-after"]) <= 3
            right = {"Authorization": f"Bearer {TOKEN}"}
            assert client.get("/v1/queues", headers=right).status_code == 429
            r = client.post("/login", data={"token": TOKEN})
            assert (r.status_code, r.json()["error"]["code"]) == (429, "too_many_attempts")
            r = client.post("/login", data={"token": TOKEN}, headers={"Accept": "text/html"})
            assert r.status_code == 429 and "too many wrong tokens" in r.text  # the form
            assert "sqldelay_session" not in client.cookies
            deadline = time.monotonic() + 30
            while (r := client.get("/v1/queues", headers=right)).status_code == 429:
                assert time.monotonic() < deadline, "the address stayed refused"
                time.sleep(0.1)
            assert r.status_code == 200
    finally:
        server.stop()


def test_the_dashboard_page_shows_nothing_without_a_token(anonymous, http):
    login = anonymous.get("/")
    assert login.status_code == 200 and 'name="token"' in login.text
    assert "csrf-token" not in login.text
    assert "frame-ancestors 'none'" in login.headers["content-security-policy"]
    page = http.get("/")
    assert 'name="csrf-token"' in page.text and 'name="role" content="admin"' in page.text
    script = anonymous.get("/assets/dashboard.js")  # the package's own files, no data
    assert script.status_code == 200 and "text/javascript" in script.headers["content-type"]
    assert anonymous.get("/assets/nothing.js").status_code == 404
    assert anonymous.get("/v1/throughput").status_code == 401
    assert http.get("/v1/throughput").json()["problem"] is None  # the table keeps history


def test_a_row_that_cannot_be_read_is_shown_with_the_reason_not_a_500(http, q, engine,
                                                                     table_name):
    from sqldelay import queue_table

    q.offer("good", 1)
    q.offer("spoiled", 2)
    t = queue_table(sa.MetaData(), table_name)
    with engine.begin() as conn:  # as a client of another kind, or a person, might write it
        conn.execute(sa.update(t).where(t.c.pkind == q.pkind, t.c.pkey == "spoiled")
                     .values(payload=b"{", scheduled_at_initially=10**16))
    r = http.get(url(q, "spoiled"))
    assert r.status_code == 200
    body = r.json()
    assert body["payload"] is None and "JSONDecodeError" in body["unreadable"]
    assert body["scheduled_at"].startswith("9999-12-31")
    r = http.get(url(q), params={"state": "due"})
    assert r.status_code == 200
    shown = {m["key"]: m for m in r.json()["messages"]}
    assert set(shown) == {"good", "spoiled"} and "unreadable" not in shown["good"]


def test_a_limit_the_database_cannot_keep_is_refused_with_409(http, q, monkeypatch):
    # as on a Galera node, whose claims count the messages in flight under node-local locks
    monkeypatch.setattr(type(q.dao), "multi_primary", classmethod(lambda cls, conn: True))
    r = http.put(f"/v1/queues/{q.name}/concurrency-limit", json={"limit": 3})
    assert (r.status_code, r.json()["error"]["code"]) == (409, "unsupported_feature")
    assert "Galera" in r.json()["error"]["message"]
    assert q.flow_control().concurrency_limit is None


def test_limits_pause_and_what_the_queue_list_shows(http, q, engine, table_name):
    q.offer("k", 1)
    base = f"/v1/queues/{q.name}"
    r = http.put(base + "/rate-limit", json={"limit": 10, "per_seconds": 60})
    assert (r.status_code, r.json()["rate_limit"], r.json()["rate_period_seconds"]) == (
        200, 10, 60.0)
    r = http.put(base + "/concurrency-limit", json={"limit": 3})
    assert (r.status_code, r.json()["concurrency_limit"]) == (200, 3)
    control = q.flow_control()
    assert (control.rate_limit, control.rate_period, control.concurrency_limit) == (
        10, timedelta(minutes=1), 3)
    assert http.put(base + "/rate-limit", json={"limit": 5}).json()["rate_period_seconds"] == 1
    http.post(base + "/pause")
    other = DelayedQueue(engine, q.name + "_b", table_name=table_name)
    other.offer("k", 1)
    listed = {s["queue"]: s for s in http.get("/v1/queues",
                                              params={"prefix": q.name}).json()["queues"]}
    assert {k: listed[q.name][k] for k in ("paused", "rate_limit", "rate_period_seconds",
                                           "concurrency_limit")} == {
        "paused": True, "rate_limit": 5, "rate_period_seconds": 1.0, "concurrency_limit": 3}
    assert {k: listed[other.name][k] for k in ("paused", "rate_limit", "concurrency_limit")} \
        == {"paused": False, "rate_limit": None, "concurrency_limit": None}

    assert http.delete(base + "/rate-limit").json()["rate_limit"] is None
    assert http.delete(base + "/concurrency-limit").json()["concurrency_limit"] is None
    assert http.delete(base + "/concurrency-limit").status_code == 200  # lifting is idempotent
    control = q.flow_control()
    assert (control.paused, control.rate_limit, control.concurrency_limit) == (True, None, None)


BAD_LIMITS = [
    # (path, body, field, code)
    ("rate-limit", {}, "limit", "missing_field"),
    ("rate-limit", {"limit": 0}, "limit", "invalid"),
    ("rate-limit", {"limit": 2**31}, "limit", "invalid"),
    ("rate-limit", {"limit": 1.5}, "limit", "invalid"),
    ("rate-limit", {"limit": True}, "limit", "invalid"),
    ("rate-limit", {"limit": None}, "limit", "invalid"),
    ("rate-limit", {"limit": 1, "per_seconds": 0}, "per_seconds", "invalid"),
    ("rate-limit", {"limit": 1, "per_seconds": 0.0004}, "per_seconds", "invalid"),
    ("rate-limit", {"limit": 1, "per_seconds": 10**20}, "per_seconds", "invalid"),
    ("rate-limit", {"limit": 1, "per_seconds": "PT1S"}, "per_seconds", "invalid"),
    ("rate-limit", {"limit": 1, "per": 1}, "per", "unknown_field"),
    ("rate-limit", [1], "body", "not_an_object"),
    ("concurrency-limit", {"limit": 1, "per_seconds": 1}, "per_seconds", "unknown_field"),
    ("concurrency-limit", {"limit": -1}, "limit", "invalid"),
]


@pytest.mark.parametrize(("path", "body", "field", "code"), BAD_LIMITS,
                         ids=[f"{b[0]}-{json.dumps(b[1])}" for b in BAD_LIMITS])
def test_bad_limits_are_refused_naming_the_field(http, q, path, body, field, code):
    r = http.put(f"/v1/queues/{q.name}/{path}", json=body)
    assert r.status_code == 400, r.text
    assert (r.json()["error"]["field"], r.json()["error"]["code"]) == (field, code)
    assert q.flow_control().rate_limit is None and q.flow_control().concurrency_limit is None


def test_an_unknown_queue_is_a_404_and_a_known_one_is_not(http, q, engine, table_name):
    r = http.get(f"/v1/queues/{q.name}")
    assert (r.status_code, r.json()["error"]["code"], r.json()["error"]["field"]) == (
        404, "not_found", "queue")
    # its collections are empty lists, not missing
    assert http.get(url(q)).json()["messages"] == []
    assert http.get(f"/v1/queues/{q.name}/dead-letters").json()["total"] == 0
    http.post(f"/v1/queues/{q.name}/pause")  # paused before its first message: known
    assert http.get(f"/v1/queues/{q.name}").json()["paused"] is True
    http.post(f"/v1/queues/{q.name}/resume")
    assert http.get(f"/v1/queues/{q.name}").status_code == 404
    limited = DelayedQueue(engine, unique_name("web"), table_name=table_name)
    limited.set_concurrency_limit(2)
    assert http.get(f"/v1/queues/{limited.name}").json()["concurrency_limit"] == 2
    q.offer("k", 1)
    assert http.get(f"/v1/queues/{q.name}").json()["due"] == 1
    DeadLetters.of(q).bury(q.poll(), "boom")
    assert http.get(f"/v1/queues/{q.name}").json()["dead_letters"] == 1


def test_delete_removes_what_get_shows_a_dead_letter_too(http, q):
    q.offer("k", {"n": 1})
    DeadLetters.of(q).bury(q.poll(), "RuntimeError: boom")
    assert http.get(url(q, "k")).json()["state"] == "dead_lettered"
    assert http.delete(url(q, "k")).status_code == 204
    assert http.get(url(q, "k")).status_code == 404
    assert DeadLetters.of(q).count(q.name) == 0
    r = http.delete(url(q, "k"))
    assert (r.status_code, r.json()["error"]["code"]) == (404, "not_found")

    # a key in the queue and among the dead letters: GET shows the message, DELETE drops it,
    # and GET then shows the dead letter, which the next DELETE drops
    q.offer("both", 1)
    DeadLetters.of(q).bury(q.poll(), "first failure")
    q.offer("both", 2)
    assert http.get(url(q, "both")).json()["state"] == "due"
    assert http.delete(url(q, "both")).status_code == 204
    assert http.get(url(q, "both")).json()["state"] == "dead_lettered"
    assert http.delete(url(q, "both")).status_code == 204
    assert http.get(url(q, "both")).status_code == 404


def events(http, q, key, path=None):
    """The key's events over HTTP (``path``: the key as it goes in the path)."""
    r = http.get(url(q, path or key) + "/history")
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["queue"], body["key"]) == (q.name, key)
    return body["events"]


def test_a_message_history_over_http(http, engine, table_name):
    clock = FakeClock(datetime.now(UTC))
    q = DelayedQueue(engine, unique_name("web"), table_name=table_name, history=True,
                     clock=clock, acquire_timeout=timedelta(minutes=1))
    q.offer("order/7", {"n": 7}, by="shop", priority=3, group="g")
    q.poll(by="worker-1")
    clock.advance(timedelta(minutes=2))  # its lock expires
    env = q.poll(by="worker-2")
    try:
        raise ValueError("card declined")
    except ValueError as exc:
        env.release(error=error_text(exc))
    q.poll(by="worker-3").ack()
    timeline = events(http, q, "order/7")
    assert [(e["event"], e["actor"], e["attempt"]) for e in timeline] == [
        ("offered", "shop", None), ("claimed", "worker-1", 1),
        ("lock_expired", "worker-1", 1), ("claimed", "worker-2", 2),
        ("failed", "worker-2", 2), ("claimed", "worker-3", 3), ("acked", "worker-3", 3)]
    assert "priority 3, group g" in timeline[0]["detail"]
    failed = timeline[4]["detail"]
    assert failed.splitlines()[0].endswith(": ValueError: card declined")
    assert "raise ValueError" in failed  # the traceback follows the message
    assert when(timeline[0]["at"]) <= when(timeline[-1]["at"])
    # the message is gone (acked); its history is not
    assert http.get(url(q, "order/7")).status_code == 404

    r = http.get(url(q, "never") + "/history")
    assert (r.status_code, r.json()["error"]["code"]) == (404, "not_found")
    r = http.get(url(q, "k" * 201) + "/history")
    assert (r.status_code, r.json()["error"]["field"]) == (400, "key")
    # a message offered without history has none: an empty timeline, not a 404
    DelayedQueue(engine, q.name, table_name=table_name).offer("plain", 1)
    assert events(http, q, "plain") == []


def test_a_table_without_history_says_so(tmp_path):
    url = f"sqlite:///{tmp_path / 'q.db'}"
    engine = sa.create_engine(url)
    create_schema(engine)  # no history table
    DelayedQueue(engine, "q").offer("k", 1)
    with TestClient(create_app(create_async_engine(url), token=TOKEN)) as client:
        r = client.get("/v1/queues/q/messages/k/history",
                       headers={"Authorization": f"Bearer {TOKEN}"})
    assert (r.status_code, r.json()["error"]["code"]) == (404, "no_history")
    assert "queue_history" in r.json()["error"]["message"]


def test_a_key_ending_in_history_is_read_with_its_slash_encoded(http, engine, table_name):
    q = DelayedQueue(engine, unique_name("web"), table_name=table_name, history=True)
    q.offer("report/history", {"n": 1}, by="shop")
    q.offer("report", {"n": 2}, by="shop")
    status = http.get(url(q, "report%2Fhistory")).json()
    assert (status["key"], status["payload"]) == ("report/history", {"n": 1})
    assert [e["event"] for e in events(http, q, "report")] == ["offered"]
    assert [e["event"] for e in events(http, q, "report/history", "report%2Fhistory")] == [
        "offered"]
    assert http.get(url(q, "report/history") + "/history").json()["key"] == "report/history"
    # the other methods have no history route: the whole path is the key
    assert http.delete(url(q, "report/history")).status_code == 204
    assert q.get("report/history") is None and q.get("report") is not None


class StoringTracer(Tracer):
    """Stores a fixed trace context with every offer, as the OpenTelemetry tracer would."""

    CONTEXT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

    def context(self):
        return self.CONTEXT


def test_a_message_shows_every_field(http, engine, table_name):
    q = DelayedQueue(engine, unique_name("web"), table_name=table_name, history=True,
                     tracer=StoringTracer())
    q.offer("k", {"n": 1}, by="producer-1", priority=-4, group="g1")
    env = q.poll(by="consumer-9")
    status = http.get(url(q, "k")).json()
    assert {k: status[k] for k in ("state", "priority", "group", "attempt", "claimed_by",
                                   "enqueued_by")} == {
        "state": "in_flight", "priority": -4, "group": "g1", "attempt": 1,
        "claimed_by": "consumer-9", "enqueued_by": "producer-1"}
    assert when(status["locked_until"]) == env.locked_until
    assert "trace_context" in status
    assert env.trace_context == StoringTracer.CONTEXT


def test_a_message_shows_its_trace_context(http, engine, table_name):
    q = DelayedQueue(engine, unique_name("web"), table_name=table_name,
                     tracer=StoringTracer())
    q.offer("k", {"n": 1})
    assert http.get(url(q, "k")).json()["trace_context"] == StoringTracer.CONTEXT
