"""The dashboard at ``/``: a login form, then one page whose script reads and operates the
queues through the REST API with the session cookie (and the session's CSRF token for
changes, sign-out included), plus the throughput the service samples. Every asset comes
from this package: nothing is loaded from elsewhere, so it works without internet."""

from __future__ import annotations

import html
from importlib import resources
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from .auth import COOKIE, Tokens, client_address, cross_site_problem, throttled
from .errors import ApiError
from .inputs import read_limited
from .sessions import Sessions, Throttle
from .throughput import Sampler

LOGIN_BODY = 4096  # bytes of the login form
STATIC = resources.files(__package__) / "static"
ASSETS = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}
# the page runs only its own script and style, and is never framed
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


def _asset(name: str) -> str:
    return (STATIC / name).read_text(encoding="utf-8")


class Dashboard:
    def __init__(self, tokens: Tokens, sessions: Sessions, throttle: Throttle,
                 sampler: Sampler) -> None:
        self.tokens = tokens
        self.sessions = sessions
        self.throttle = throttle
        self.sampler = sampler

    async def page(self, request: Request) -> Response:
        """The dashboard for a signed-in browser (or a bearer token), the login form
        otherwise."""
        role = request.scope.get("sqldelay.role")
        if role is None:
            return self._login_form()
        self.sampler.start()
        session = request.scope.get("sqldelay.session")
        text = (_asset("dashboard.html")
                .replace("{{csrf}}", html.escape(session.csrf if session else ""))
                .replace("{{role}}", html.escape(role))
                .replace("{{root}}", html.escape(request.scope.get("root_path", ""))))
        return _html(text)

    async def login(self, request: Request) -> Response:
        """A new session for a valid token: its random id in the cookie."""
        problem = cross_site_problem(dict(request.headers), "a login")
        if problem is not None:
            return problem.response()
        address = client_address(request.scope)
        wait = self.throttle.wait(address)
        if wait:  # the token is not even read
            message = throttled(wait)
            response = (self._login_form(message.message, status=429)
                        if "text/html" in request.headers.get("accept", "")
                        else message.response())
            response.headers["Retry-After"] = Throttle.retry_after(wait)
            return response
        body = await read_limited(request, LOGIN_BODY)
        token = parse_qs(body.decode("utf-8", "replace")).get("token", [""])[0].strip()
        role = self.tokens.role_of(token)
        if role is None:
            self.throttle.failed(address)
            return self._login_form("That token is not valid.", status=401)
        self.sessions.close(request.scope.get("sqldelay.session"))  # the one it replaces
        root = request.scope.get("root_path", "")
        response = RedirectResponse(f"{root}/", status_code=303)
        response.set_cookie(COOKIE, self.sessions.open(role), httponly=True,
                            samesite="strict", secure=request.url.scheme == "https",
                            path=f"{root}/")
        return response

    async def logout(self, request: Request) -> Response:
        """Closes the browser's session (the server forgets it: a copy of the cookie is of no
        use afterwards). Only from the dashboard's own page, which sends the session's CSRF
        token in the form."""
        problem = cross_site_problem(dict(request.headers), "a sign-out")
        if problem is not None:
            return problem.response()
        session = request.scope.get("sqldelay.session")
        if session is not None:
            body = await read_limited(request, LOGIN_BODY)
            given = parse_qs(body.decode("utf-8", "replace")).get("csrf", [""])[0]
            if not Sessions.csrf_matches(session, given):
                return ApiError(403, "csrf", "the sign-out form's CSRF token is missing or "
                                "wrong", field="csrf").response()
            self.sessions.close(session)
        root = request.scope.get("root_path", "")
        response = RedirectResponse(f"{root}/", status_code=303)
        response.delete_cookie(COOKIE, path=f"{root}/", httponly=True, samesite="strict",
                               secure=request.url.scheme == "https")
        return response

    async def asset(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in ASSETS:
            raise ApiError(404, "not_found", f"no asset {name!r}")
        return Response(_asset(name), media_type=ASSETS[name],
                        headers={"Cache-Control": "no-cache"})

    async def throughput(self, request: Request) -> Response:
        """Offered and acked per minute of each queue, as the service sampled them."""
        self.sampler.start()  # when mounted in another app, whose lifespan is not ours
        return JSONResponse(self.sampler.snapshot())

    def _login_form(self, problem: str = "", status: int = 200) -> Response:
        text = _asset("login.html").replace(
            "{{problem}}", f'<p class="problem" role="alert">{html.escape(problem)}</p>'
            if problem else "")
        return _html(text, status)

    def routes(self) -> list[Route]:
        return [Route("/", self.page, methods=["GET"]),
                Route("/login", self.login, methods=["POST"]),
                Route("/logout", self.logout, methods=["POST"]),
                Route("/assets/{name}", self.asset, methods=["GET"]),
                Route("/v1/throughput", self.throughput, methods=["GET"])]


def _html(text: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(text, status_code=status, headers={
        "Content-Security-Policy": CSP, "X-Frame-Options": "DENY",
        "Referrer-Policy": "same-origin", "Cache-Control": "no-store"})
