"""``sqldelay serve``: the HTTP API and dashboard (``sqldelay.web``) on uvicorn.

    SQLDELAY_TOKEN=... sqldelay serve --url URL [--host 127.0.0.1] [--port 8080]
    sqldelay serve --url URL --token-file /run/secrets/sqldelay-token

Tokens come from a file or the environment, never from the command line, where ``ps`` would
show them. Without a token the service binds only a loopback address, with a token of its own
made for the run and printed once; a public address without a token is refused.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import secrets
import sys
from pathlib import Path

TOKEN_ENV = "SQLDELAY_TOKEN"
READ_ONLY_TOKEN_ENV = "SQLDELAY_READ_ONLY_TOKEN"


def register(sub) -> None:
    from .cli import add_db_arguments

    p = sub.add_parser("serve", help="serve the HTTP API and the dashboard",
                       description="Serve the REST API (/v1) and the dashboard (/) over the "
                                   "queue table. Needs the web extra: pip install "
                                   "'sqldelay[web]'.")
    add_db_arguments(p)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; any other than a loopback "
                        "address needs a token)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    p.add_argument("--token-file", type=Path,
                   help=f"file holding the token (default: ${TOKEN_ENV})")
    p.add_argument("--read-only-token-file", type=Path,
                   help=f"file holding a token that may only read "
                        f"(default: ${READ_ONLY_TOKEN_ENV})")
    p.add_argument("--max-body", type=int, default=None,
                   help="largest request body in bytes (default 1 MiB)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from .web import create_app
        from .web.app import MAX_BODY
    except ModuleNotFoundError as exc:
        raise SystemExit(f"sqldelay serve needs the web extra ({exc.name} is missing): "
                         "pip install 'sqldelay[web]'") from None
    from .engines import create_async_engine

    token = _token(args.token_file, TOKEN_ENV, "--token-file")
    read_only = _token(args.read_only_token_file, READ_ONLY_TOKEN_ENV, "--read-only-token-file")
    if token is None:
        if not is_loopback(args.host):
            raise SystemExit(f"sqldelay serve: refusing to bind {args.host} without a token; "
                             f"give --token-file or ${TOKEN_ENV}")
        token = secrets.token_urlsafe(32)
        print(f"sqldelay serve: no token given; this run's token is {token}", file=sys.stderr)
    if not 0 < args.port < 65536:
        raise SystemExit(f"sqldelay serve: --port must be from 1 to 65535, got {args.port}")
    engine = create_async_engine(args.url)
    try:
        app = create_app(engine, token=token, read_only_token=read_only,
                         table_name=args.table, max_body=args.max_body or MAX_BODY)
    except (TypeError, ValueError) as exc:
        raise SystemExit(f"sqldelay serve: {exc}") from None
    problem = asyncio.run(_database_problem(app))
    if problem:
        raise SystemExit(f"sqldelay serve: {problem}")
    print(f"sqldelay serve: http://{_url_host(args.host)}:{args.port}/ "
          f"(API under /v1, OpenAPI at /v1/openapi.json)", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port,
                log_level="info" if args.verbose else "warning")
    return 0


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def _token(path: Path | None, env: str, option: str) -> str | None:
    if path is not None:
        try:
            text = path.read_text().strip()
        except OSError as exc:
            raise SystemExit(f"sqldelay serve: cannot read {option} {path}: "
                             f"{exc.strerror}") from None
        if not text:
            raise SystemExit(f"sqldelay serve: {option} {path} is empty")
        return text
    value = os.environ.get(env, "").strip()
    return value or None


async def _database_problem(app) -> str | None:
    """Why the service could not work (the database unreachable, no queue table), or None."""
    service = app.state.service
    try:
        await service.dead.count()
    except Exception as exc:  # reported as one line; -v shows uvicorn's own logs
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    finally:
        await service.engine.dispose()
    return None


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
