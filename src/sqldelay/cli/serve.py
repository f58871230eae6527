"""``sqldelay serve``: the HTTP API and dashboard (``sqldelay.web``) on uvicorn.

    SQLDELAY_TOKEN=... sqldelay serve --url URL [--host 127.0.0.1] [--port 8080]
    sqldelay serve --url URL --token-file /run/secrets/sqldelay-token

Tokens come from a file or the environment, never from the command line, where ``ps`` would
show them. Without a token the service binds only a loopback address, with a token of its own
made for the run and printed once; a public address without a token is refused.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import secrets
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..engines import create_async_engine
from .support import CliError, add_db_arguments, database

if TYPE_CHECKING:
    from .support import Subcommands

TOKEN_ENV = "SQLDELAY_TOKEN"
READ_ONLY_TOKEN_ENV = "SQLDELAY_READ_ONLY_TOKEN"


def register(sub: Subcommands) -> None:
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
    p.add_argument("--max-connections", type=int, default=None,
                   help="connections and requests served at once; beyond it, 503 "
                        "(default 100)")
    p.add_argument("--history", action="store_true",
                   help="record the events of what the service offers, drops and requeues "
                        "(needs the history table: sqldelay migrate --history)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ..web import create_app
        from ..web.app import KEEP_ALIVE, MAX_BODY, MAX_CONNECTIONS
        from ..web.auth import Tokens
    except ModuleNotFoundError as exc:
        raise CliError(f"it needs the web extra ({exc.name} is missing): "
                       "pip install 'sqldelay[web]'") from None
    token = _token(args.token_file, TOKEN_ENV, "--token-file")
    read_only = _token(args.read_only_token_file, READ_ONLY_TOKEN_ENV, "--read-only-token-file")
    if token is None:
        if not is_loopback(args.host):
            raise CliError(f"refusing to bind {args.host} without a token; give --token-file "
                           f"or ${TOKEN_ENV}")
        token = made = secrets.token_urlsafe(32)  # printed once every check has passed
    else:
        made = None
    try:
        Tokens(token, read_only)  # checked before the database is reached
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if not 0 < args.port < 65536:
        raise CliError(f"--port must be from 1 to 65535, got {args.port}")
    if args.max_connections is not None and args.max_connections < 1:
        raise CliError(f"--max-connections must be at least 1, got {args.max_connections}")
    with database(args):  # reached once, the queue table there: one-line errors otherwise
        pass
    _check_port(args.host, args.port)
    engine = create_async_engine(args.resolved_url)
    try:
        app = create_app(engine, token=token, read_only_token=read_only,
                         table_name=args.table, max_body=args.max_body or MAX_BODY,
                         history=args.history or None)
    except (TypeError, ValueError) as exc:
        raise CliError(str(exc)) from None
    if made is not None:
        print(f"sqldelay serve: no token given; this run's token is {made}", file=sys.stderr)
    print(f"sqldelay serve: http://{_url_host(args.host)}:{args.port}/ "
          f"(API under /v1, OpenAPI at /v1/openapi.json)", file=sys.stderr)
    # a bound on connections and requests at once, and on an idle connection's life, whatever
    # clients do (the app bounds each body's size and the time it takes to arrive)
    uvicorn.run(app, host=args.host, port=args.port,
                limit_concurrency=args.max_connections or MAX_CONNECTIONS,
                timeout_keep_alive=KEEP_ALIVE,
                log_level="info" if args.verbose else "warning")
    return 0


def _check_port(host: str, port: int) -> None:
    """An error naming the address unless ``host:port`` can be bound now, bound as uvicorn
    (asyncio's create_server) will bind it: each address the host resolves to, with
    SO_REUSEADDR. Checked before the service's URL is printed: uvicorn would log its own
    ``[Errno 98]`` after that line, and exit."""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise CliError(f"cannot serve on {host}:{port}: {exc.strerror}") from None
    for family, kind, proto, _, address in dict.fromkeys(addresses):
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                raise CliError(f"cannot serve on {_url_host(host)}:{port}: "
                               f"{exc.strerror or exc} (another process listens there? "
                               f"give another --port)") from None


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
            raise CliError(f"cannot read {option} {path}: {exc.strerror}") from None
        if not text:
            raise CliError(f"{option} {path} is empty")
        return text
    value = os.environ.get(env, "").strip()
    return value or None


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
