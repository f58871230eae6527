"""A real uvicorn server on a loopback port, in a thread of the test process, serving
``sqldelay.web.create_app`` over the target database through its async driver."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import uvicorn

from sqldelay.engines import async_url, create_async_engine
from sqldelay.web import create_app

TOKEN = "admin-token-0123456789"
READ_ONLY_TOKEN = "reader-token-0123456789"


class Server:
    """``create_app`` served on 127.0.0.1 at a free port; ``url`` is its root."""

    def __init__(self, backend_url: str, table_name: str, *, engine_kwargs: dict | None = None,
                 sampler_clock=None, **app_kwargs) -> None:
        """``engine_kwargs``: for ``create_async_engine`` (default: a pool of 10 + 10);
        ``sampler_clock``: the wall clock the throughput sampler goes by (epoch seconds)."""
        self._sampler_clock = sampler_clock
        self._backend_url = backend_url
        self._table = table_name
        self._engine_kwargs = engine_kwargs
        self._kwargs = {"token": TOKEN, "read_only_token": READ_ONLY_TOKEN, **app_kwargs}
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._server: uvicorn.Server | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="uvicorn")
        self._error: BaseException | None = None

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported by start()
            self._error = exc

    async def _serve(self) -> None:
        pool = {} if self._backend_url.startswith("sqlite") else {"pool_size": 10,
                                                                   "max_overflow": 10}
        if self._engine_kwargs is not None:
            pool = self._engine_kwargs
        engine = create_async_engine(async_url(self._backend_url), **pool)
        self.loop = asyncio.get_running_loop()
        app = create_app(engine, table_name=self._table, **self._kwargs)
        if self._sampler_clock is not None:
            app.state.sampler.clock = self._sampler_clock
        self.app = app
        config = uvicorn.Config(app, log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        try:
            await self._server.serve(sockets=[self._sock])
        finally:
            await engine.dispose()

    def start(self) -> Server:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not (self._server is not None and self._server.started):
            if self._error is not None:
                raise self._error
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        return self

    def call(self, coroutine):
        """Run ``coroutine`` on the server's event loop; its result (or error)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=60)

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        self._thread.join(timeout=30)
        self._sock.close()
