"""HTTP push throughput: ``sqldelay serve`` beside direct library calls, in the same run.

web_push: ``sqldelay serve`` runs as a process of its own (one uvicorn worker, the asyncio
front end over the database's async driver) on a loopback port, and ``producers`` concurrent
HTTP/1.1 keep-alive connections push new messages at it: ``single_messages`` one per
``PUT /v1/queues/{queue}/messages/{key}``, and ``messages`` in ``POST .../messages`` batches of
``batch``. Beside them, in alternating rounds (medians, with min and max), ``producers``
threads make the direct calls that do the same: ``offer`` per message and ``offer_many`` per
batch. The ratio is what the HTTP layer keeps of the library's rate; the goal for batches is
at least half.

The load client is a few lines of HTTP/1.1 over asyncio streams rather than a full client
library, so that its own cost, on the same machine as the server, stays small beside the
server's (as the C clients do for the database ceilings).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime

from sqldelay import Message

from ..harness import PAYLOAD, ROUNDS, Bench, alternate, run_threads, spread

SCENARIO = "web_push"
HTTP = "sqldelay http"
DIRECT = "direct library calls"


def web_push(bench: Bench) -> None:
    table = bench.table_for()
    token = secrets.token_urlsafe(24)
    with _serve(bench.url, table, token) as port:
        direct = bench.queue("web_direct")
        via_http = bench.queue("web_http")  # the queue the server fills, to empty it
        single, many = bench.sizes.single_messages, bench.sizes.messages
        many -= many % bench.batch
        rounds = itertools.count()  # each round offers keys of its own

        def http(batch: int, count: int) -> float:
            rate = asyncio.run(_push(port, token, next(rounds), batch, count, bench.producers))
            via_http.clear()
            return rate

        def library(batch: int, count: int) -> float:
            return _direct(direct, next(rounds), batch, count, bench.producers)

        runs = alternate(ROUNDS, {
            ("single", HTTP): lambda: http(1, single),
            ("single", DIRECT): lambda: library(1, single),
            ("batch", HTTP): lambda: http(bench.batch, many),
            ("batch", DIRECT): lambda: library(bench.batch, many)})
    for (kind, subject), values in runs.items():
        stats = spread(values)
        metric = ("messages/s, one per request" if kind == "single"
                  else f"messages/s, batches of {bench.batch}")
        bench.add(SCENARIO, subject, metric, stats["median"],
                  params={"messages": single if kind == "single" else many,
                          "batch": 1 if kind == "single" else bench.batch,
                          "clients": bench.producers, **stats})


def _direct(queue, round_no: int, batch: int, count: int, clients: int) -> float:
    now = datetime.now(UTC)
    batches = count // batch

    def work(i: int) -> None:
        for b in range(i, batches, clients):
            if batch == 1:
                queue.offer(f"r{round_no}-{b}", PAYLOAD, now)
            else:
                queue.offer_many([Message(f"r{round_no}-{b}-{j}", PAYLOAD, now)
                                  for j in range(batch)])

    elapsed = run_threads(clients, work)
    queue.clear()
    return batches * batch / elapsed


async def _push(port: int, token: str, round_no: int, batch: int, count: int,
                clients: int) -> float:
    batches = count // batch
    queue = "/v1/queues/web_http/messages"
    auth = f"Authorization: Bearer {token}\r\n"

    async def client(i: int, ready: asyncio.Event) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            await ready.wait()
            for b in range(i, batches, clients):
                if batch == 1:
                    path = f"{queue}/r{round_no}-{b}"
                    body = {"payload": PAYLOAD}
                    method, expected = "PUT", 201
                else:
                    path = queue
                    body = {"messages": [{"key": f"r{round_no}-{b}-{j}", "payload": PAYLOAD}
                                         for j in range(batch)]}
                    method, expected = "POST", 201  # created: the keys are new
                data = json.dumps(body).encode()
                writer.write(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}"
                             f"Content-Type: application/json\r\n"
                             f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
                status = await _response(reader)
                if status != expected:
                    raise RuntimeError(f"{method} {path} answered {status}")
        finally:
            writer.close()

    ready = asyncio.Event()
    tasks = [asyncio.create_task(client(i, ready)) for i in range(clients)]
    await asyncio.sleep(0.05)  # every connection open before the clock starts
    began = time.perf_counter()
    ready.set()
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - began
    return batches * batch / elapsed


async def _response(reader: asyncio.StreamReader) -> int:
    """Read one response (status line, headers, body of Content-Length); its status."""
    status = int((await reader.readline()).split()[1])
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        if name.lower() == "content-length":
            length = int(value)
    await reader.readexactly(length)
    return status


@contextlib.contextmanager
def _serve(url: str, table: str, token: str):
    """``sqldelay serve`` on a free loopback port, until the block ends; yields the port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "sqldelay.cli", "serve", "--url", url, "--table", table,
         "--port", str(port)], env={**os.environ, "SQLDELAY_TOKEN": token},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"sqldelay serve stopped: {proc.stderr.read().strip()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port),
                                                                        timeout=1):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("sqldelay serve did not start within 60 s")
            time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
