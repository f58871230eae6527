"""``create_app``: the HTTP service as one Starlette application (REST API under ``/v1``, its
OpenAPI document, the dashboard at ``/``), to serve with ``sqldelay serve`` or to mount in an
application of one's own."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..concurrency_async import engine_problem
from ..errors import SchemaMissingError, UnsupportedFeatureError
from ..history import History, check_actor
from ..schema import DEFAULT_TABLE
from .api import Service
from .auth import AuthMiddleware, Tokens
from .dashboard import Dashboard
from .errors import ApiError
from .inputs import BodyDeadline, StrictUtf8
from .openapi import openapi_document
from .sessions import Sessions, Throttle
from .throughput import Sampler

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

MAX_BODY = 1024 * 1024  # bytes
MAX_BATCH = 1000  # messages in one batch request
BODY_TIMEOUT = timedelta(seconds=30)  # from a request's start to the end of its body
# what ``sqldelay serve`` gives uvicorn: connections and tasks at once (beyond: 503), and
# how long an idle connection is kept open after a response (seconds)
MAX_CONNECTIONS = 100
KEEP_ALIVE = 5


def create_app(engine: AsyncEngine, *, token: str, read_only_token: str | None = None,
               table_name: str = DEFAULT_TABLE,
               history: bool | timedelta | History | None = None,
               max_body: int = MAX_BODY, max_batch: int = MAX_BATCH,
               actor: str | None = None,
               sample_every: timedelta = timedelta(seconds=10),
               body_timeout: timedelta = BODY_TIMEOUT) -> Starlette:
    """The service over ``engine`` (an ``AsyncEngine``: see
    ``sqldelay.engines.create_async_engine``) and queue table ``table_name``.

    ``token`` (at least 16 characters) may do everything; ``read_only_token`` only read.
    ``history`` is given to the queues the service opens (as ``AsyncDelayedQueue``'s);
    ``max_body`` bounds a request's body in bytes, ``max_batch`` a batch's messages;
    ``actor`` names the service in ``enqueued_by`` and the history (default: host:pid:task).
    ``sample_every``: how often the dashboard's throughput is sampled from the history.
    ``body_timeout``: how long after a request begins its body must have arrived (408).
    """
    problem = engine_problem(engine, "sqldelay.web.create_app")
    if problem:
        raise TypeError(problem.split("; with a blocking")[0])
    tokens = Tokens(token, read_only_token)
    for name, value in (("max_body", max_body), ("max_batch", max_batch)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if not isinstance(body_timeout, timedelta) or body_timeout <= timedelta(0):
        raise ValueError(f"body_timeout must be a positive timedelta, got {body_timeout!r}")
    check_actor(actor, "actor")
    service = Service(engine, table_name=table_name, history=history, max_body=max_body,
                      max_batch=max_batch, actor=actor)
    document = openapi_document(max_body=max_body, max_batch=max_batch)
    sampler = Sampler(service.inspector.executor, table_name, sample_every)
    sessions, throttle = Sessions(), Throttle()  # in memory: see sessions.py
    dashboard = Dashboard(tokens, sessions, throttle, sampler)

    async def openapi(request: Request) -> Response:
        return JSONResponse(document)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        sampler.start()
        try:
            yield
        finally:
            await sampler.stop()

    routes = [*service.routes(), Route("/v1/openapi.json", openapi, methods=["GET"]),
              *dashboard.routes()]
    # by exception class: Starlette types each handler as taking any Exception
    handlers: dict[Any, Callable[..., Any]] = {
        ApiError: _api_error, HTTPException: _http_error, SchemaMissingError: _schema_missing,
        UnsupportedFeatureError: _unsupported,
        sa.exc.DBAPIError: _database_error, sa.exc.TimeoutError: _pool_timeout,
        # some async drivers let a refused connection out as it is
        OSError: _database_error}
    app = Starlette(routes=routes, lifespan=lifespan,
                    middleware=[Middleware(StrictUtf8),
                                Middleware(BodyDeadline,
                                           seconds=body_timeout.total_seconds()),
                                Middleware(AuthMiddleware, tokens=tokens,
                                           sessions=sessions, throttle=throttle)],
                    exception_handlers=handlers)
    app.state.service = service
    app.state.tokens = tokens
    app.state.sessions = sessions
    app.state.sampler = sampler
    return app


async def _api_error(request: Request, exc: ApiError) -> Response:
    return exc.response()


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


async def _http_error(request: Request, exc: HTTPException) -> Response:
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    response = ApiError(exc.status_code, code, str(exc.detail)).response()
    for name, value in (exc.headers or {}).items():
        response.headers[name] = value
    return response


async def _schema_missing(request: Request, exc: SchemaMissingError) -> Response:
    return ApiError(503, "schema_missing", str(exc)).response()


async def _unsupported(request: Request, exc: UnsupportedFeatureError) -> Response:
    """A feature the database cannot keep (a concurrency limit on a Galera cluster): 409,
    the request at odds with how the database runs, nothing written."""
    return ApiError(409, "unsupported_feature", str(exc)).response()


async def _pool_timeout(request: Request, exc: sa.exc.TimeoutError) -> Response:
    """Every connection of the engine's pool stayed busy (a locked table, a slow database)
    for the pool's whole timeout: 503, as for a database that does not answer."""
    return ApiError(503, "database_unavailable", "no connection to the database came free "
                    "within the pool's timeout; try again").response()


async def _database_error(request: Request, exc: Exception) -> Response:
    """The database failed (unreachable, or gone away): 503, naming only the error's class,
    not its text, which may hold statements and parameters."""
    cause = type(getattr(exc, "orig", None) or exc).__name__
    return ApiError(503, "database_unavailable",
                    f"the database did not answer ({cause}); try again").response()
