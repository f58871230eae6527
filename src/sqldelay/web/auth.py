"""Who may call the service: a bearer token (full access) and an optional read-only token.

Every request but the login page and the health check needs one of them, as
``Authorization: Bearer <token>`` or, for the dashboard in a browser, as the session cookie
that ``POST /login`` sets (HttpOnly, SameSite=Strict): a random session id, not the token,
so that signing out revokes it (``sessions``). Tokens are compared in constant time; an
address that sends many wrong ones is slowed down (429). A request that changes something
and is authenticated by the cookie must also carry the session's CSRF token in
``X-CSRF-Token`` and come from this very origin (its ``Origin`` and ``Sec-Fetch-Site``, when
the browser sends them): another site can make a browser send the cookie, but neither read
the page's CSRF token nor forge those headers.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import ApiError
from .sessions import Session, Sessions, Throttle

MIN_TOKEN_LENGTH = 16
COOKIE = "sqldelay_session"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
# what needs no token: the login page (it shows no data), the login itself and the page's
# script and style (the package's files, no data)
OPEN = {("GET", "/"), ("HEAD", "/"), ("POST", "/login"), ("POST", "/logout")}
# what is served to anyone, whatever token it carries: the health check, for load balancers
# (it says whether the database answers, and nothing else)
PUBLIC = {("GET", "/v1/health"), ("HEAD", "/v1/health")}
ASSETS = "/assets/"

ADMIN = "admin"
READER = "read-only"


def check_token(token: str | None, what: str) -> None:
    if not isinstance(token, str) or len(token) < MIN_TOKEN_LENGTH:
        raise ValueError(f"the {what} must be a string of at least {MIN_TOKEN_LENGTH} "
                         "characters")
    if token != token.strip() or any(c.isspace() for c in token):
        raise ValueError(f"the {what} must not contain whitespace")


@dataclass(frozen=True)
class Tokens:
    """The service's tokens; ``role_of`` says what a presented token may do (None: nothing)."""

    admin: str
    read_only: str | None = None

    def __post_init__(self) -> None:
        check_token(self.admin, "token")
        if self.read_only is not None:
            check_token(self.read_only, "read-only token")
            if self.read_only == self.admin:
                raise ValueError("the read-only token must differ from the token")

    def role_of(self, presented: str | None) -> str | None:
        if not presented:
            return None
        given = presented.encode()
        # both compared every time, so the time taken tells nothing about which one matched
        admin = hmac.compare_digest(given, self.admin.encode())
        reader = self.read_only is not None and hmac.compare_digest(given,
                                                                    self.read_only.encode())
        return ADMIN if admin else READER if reader else None


def throttled(wait: float) -> ApiError:
    """429: the address sent too many wrong tokens; ``wait`` seconds until the next is read."""
    return ApiError(429, "too_many_attempts", "too many wrong tokens from this address; try "
                    f"again in {Throttle.retry_after(wait)} s", field="authorization")


def client_address(scope: Scope) -> str | None:
    client = scope.get("client")
    return client[0] if client else None


def cross_site_problem(headers: dict[str, str], what: str) -> ApiError | None:
    """403 unless the request comes from a page of this very origin, as far as the browser
    tells: an ``Origin`` of this host, a ``Sec-Fetch-Site`` of ``same-origin`` (or ``none``,
    typed by the user). A client that sends neither (curl) is not a browser's forgery."""
    origin = headers.get("origin")
    fetch_site = headers.get("sec-fetch-site")
    if ((origin is not None and urlsplit(origin).netloc != headers.get("host"))
            or fetch_site in ("cross-site", "same-site")):
        return ApiError(403, "cross_origin", f"{what} from another origin is refused",
                        field="origin")
    return None


class AuthMiddleware:
    """Refuses requests without a valid token or session (401), tokens from an address that
    sent too many wrong ones (429), writes by the read-only token (403) and
    cookie-authenticated writes without the CSRF token or from another origin (403); puts the
    caller's role in ``scope["sqldelay.role"]`` and a cookie's open session in
    ``scope["sqldelay.session"]``."""

    def __init__(self, app: ASGIApp, tokens: Tokens, sessions: Sessions,
                 throttle: Throttle) -> None:
        self.app = app
        self.tokens = tokens
        self.sessions = sessions
        self.throttle = throttle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], _local_path(scope)
        if (method, path) in PUBLIC:
            scope["sqldelay.role"] = scope["sqldelay.session"] = None
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        bearer = _bearer(headers.get("authorization"))
        session = None
        problem = None
        wait = 0.0
        if bearer:
            address = client_address(scope)
            wait = self.throttle.wait(address)
            role = None if wait else self.tokens.role_of(bearer)
            if wait:
                problem = throttled(wait)
            elif role is None:
                self.throttle.failed(address)
        else:  # a session id is random: guessing one is hopeless, and a stale one no attempt
            session = self.sessions.get(_cookies(headers.get("cookie")).get(COOKIE))
            role = session.role if session is not None else None
        scope["sqldelay.role"] = role
        scope["sqldelay.session"] = session
        if problem is not None:
            pass
        elif (method, path) in OPEN or (method == "GET" and path.startswith(ASSETS)):
            pass
        elif role is None:
            problem = ApiError(401, "unauthorized", "a valid token is needed: send "
                               "'Authorization: Bearer <token>'", field="authorization")
        elif method not in SAFE_METHODS:
            if role != ADMIN:
                problem = ApiError(403, "read_only", "the read-only token cannot change "
                                   "anything", field="authorization")
            elif session is not None:
                problem = (cross_site_problem(headers, "a change")
                           or _csrf_problem(session, headers.get(CSRF_HEADER)))
        if problem is not None:
            response = problem.response()
            if problem.status == 401:
                response.headers["WWW-Authenticate"] = "Bearer"
            elif problem.status == 429:
                response.headers["Retry-After"] = Throttle.retry_after(wait)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _csrf_problem(session: Session, given: str | None) -> ApiError | None:
    if not Sessions.csrf_matches(session, given):
        return ApiError(403, "csrf", "the dashboard's CSRF token is missing or wrong",
                        field=CSRF_HEADER)
    return None


def _local_path(scope: Scope) -> str:
    """The path inside this app, when it is mounted under a prefix."""
    path = scope["path"]
    root = scope.get("root_path", "")
    return path[len(root):] or "/" if root and path.startswith(root) else path


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}


def _bearer(value: str | None) -> str | None:
    if value is None:
        return None
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def _cookies(value: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in (value or "").split(";"):
        name, sep, val = part.strip().partition("=")
        if sep:
            out.setdefault(name, unquote(val))
    return out
