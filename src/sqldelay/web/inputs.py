"""What a request may carry, checked before anything is written: the body (size, JSON), the
fields of a message (payload, due time, priority, group) and query parameters. Each refusal is
an ``ApiError`` naming the field; the library's own checks decide what a key, a queue name,
a priority and a group may be, so the service accepts exactly what the library does."""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import unquote_to_bytes

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..checks import check_text, time_after, time_ms
from ..errors import InvalidArgumentError
from ..queue_base import MAX_LIMIT, check_priority
from ..schema import KEY_LENGTH
from .errors import ApiError, invalid

T = TypeVar("T")

# how deep a body's arrays and objects may nest: well under Python's recursion limit (1,000
# frames, which the handler's own frames share), so a payload accepted can be encoded, stored,
# read back and answered as JSON at any depth of the stack
MAX_DEPTH = 256
MAX_OFFSET = 10**12  # the largest offset of a page of dead letters
MESSAGE_FIELDS = {"payload", "at", "delay", "priority", "group"}
BATCH_MESSAGE_FIELDS = MESSAGE_FIELDS | {"key", "update"}
# a rate limit's period in seconds: at least the millisecond the library counts in, at most
# what a timedelta holds
MIN_PERIOD, MAX_PERIOD = 0.001, 86_399_999_999_999
# ISO-8601 durations in weeks, days, hours, minutes and seconds (years and months have no
# fixed length, so they are refused rather than guessed); [0-9], not \d, which matches every
# script's digits (and float() reads them)
_DURATION = re.compile(r"P(?:(?P<w>[0-9]+)W)?(?:(?P<d>[0-9]+)D)?(?:T(?:(?P<h>[0-9]+)H)?"
                       r"(?:(?P<m>[0-9]+)M)?(?:(?P<s>[0-9]+(?:\.[0-9]+)?)S)?)?")


@dataclass(frozen=True)
class MessageInput:
    """One message of a request, checked."""

    payload: Any
    at: datetime | None
    priority: int
    group: str | None


async def read_limited(request: Request, limit: int) -> bytes:
    """The request's body, refused (413) as soon as it is known to be over ``limit`` bytes:
    by its Content-Length, or while it streams in."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise _too_large(limit)
    return bytes(body)


async def read_json(request: Request, limit: int) -> Any:
    """The request's body as JSON (at most ``limit`` bytes), refusing anything that is not
    strict JSON (400)."""
    body = await read_limited(request, limit)
    if not body:
        raise invalid("body", "the request needs a JSON body", "missing_body")
    try:
        value = json.loads(body, parse_constant=_no_constant)
    except RecursionError:  # the parser's nesting ran into Python's recursion limit
        raise _too_deep() from None
    except (ValueError, UnicodeDecodeError) as exc:
        # ValueError includes an integer of more digits than Python converts (4,300)
        raise invalid("body", f"the body is not valid JSON: {exc}", "malformed_json") from None
    # only a body with more brackets than the limit can be nested deeper: counted in C
    if body.count(b"[") + body.count(b"{") > MAX_DEPTH and _deeper_than(value, MAX_DEPTH):
        raise _too_deep()
    return value


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value``'s arrays and objects nest more than ``limit`` levels deep (level by
    level, without recursion)."""
    level = [value] if isinstance(value, dict | list) else []
    for _ in range(limit):
        level = [child for item in level
                 for child in (item.values() if isinstance(item, dict) else item)
                 if isinstance(child, dict | list)]
        if not level:
            return False
    return True


def _too_deep() -> ApiError:
    return invalid("body", f"the body nests arrays and objects more than {MAX_DEPTH} levels "
                   "deep", "too_deep")


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _too_large(limit: int) -> ApiError:
    return ApiError(413, "body_too_large", f"the body is larger than {limit:,} bytes",
                    field="body")


def message_input(body: Any, field: str = "", *, allowed: set[str] = MESSAGE_FIELDS,
                  now: datetime | None = None) -> MessageInput:
    """The fields of one message (``field``: where it sits in the body, for errors)."""
    where = f"{field}." if field else ""
    if not isinstance(body, dict):
        raise invalid(field or "body", "a message is a JSON object", "not_an_object")
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise invalid(where + unknown[0], f"unknown field {unknown[0]!r}; known: "
                      f"{', '.join(sorted(allowed))}", "unknown_field")
    if "payload" not in body:
        raise invalid(where + "payload", "the message needs a payload", "missing_field")
    if "at" in body and "delay" in body:
        raise invalid(where + "delay", "give the due time as 'at' or as 'delay', not both",
                      "conflicting_fields")
    now = now or datetime.now(UTC)
    at = None
    if "at" in body:
        at = parse_at(body["at"], where + "at")
    elif "delay" in body:
        at = _after(now, parse_delay(body["delay"], where + "delay"), where + "delay")
    priority = body.get("priority", 0)
    _library_check(check_priority, priority, field=where + "priority")
    group = body.get("group")
    if group is not None:
        _library_check(check_text, group, "group", KEY_LENGTH, field=where + "group")
    return MessageInput(body["payload"], at, priority, group)


def limit_input(body: Any, *, rate: bool) -> tuple[int, timedelta]:
    """A limit's body: ``{"limit": n}``, and for a rate ``"per_seconds"`` (default 1)."""
    allowed = {"limit", "per_seconds"} if rate else {"limit"}
    if not isinstance(body, dict):
        raise invalid("body", "the body is a JSON object such as {\"limit\": 10}",
                      "not_an_object")
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise invalid(unknown[0], f"unknown field {unknown[0]!r}; known: "
                      f"{', '.join(sorted(allowed))}", "unknown_field")
    if "limit" not in body:
        raise invalid("limit", "the body needs a limit (a positive integer); DELETE lifts "
                      "the limit", "missing_field")
    limit = body["limit"]
    if (not isinstance(limit, int) or isinstance(limit, bool)
            or not 1 <= limit <= MAX_LIMIT):
        raise invalid("limit", f"limit is a whole number from 1 to {MAX_LIMIT}, got "
                      f"{_shown(limit)}")
    per = body.get("per_seconds", 1)
    if (isinstance(per, bool) or not isinstance(per, int | float)
            or not MIN_PERIOD <= per <= MAX_PERIOD):  # NaN and infinities are not JSON
        raise invalid("per_seconds", f"per_seconds is a number of seconds from {MIN_PERIOD} "
                      f"to {MAX_PERIOD}, got {_shown(per)}")
    return limit, timedelta(seconds=per)


def _shown(value: Any) -> str:
    """A value of the body in an error message, cut short."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:39] + "…"


def parse_at(value: Any, field: str = "at") -> datetime:
    """An RFC 3339 timestamp with its offset (``Z`` or ``+02:00``)."""
    if not isinstance(value, str):
        raise invalid(field, "'at' is an RFC 3339 timestamp string, such as "
                      "2030-01-01T12:00:00Z", "invalid_timestamp")
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise invalid(field, f"{value!r} is not an RFC 3339 timestamp",
                      "invalid_timestamp") from None
    if when.tzinfo is None or when.utcoffset() is None:
        raise invalid(field, f"{value!r} has no UTC offset; add Z or +HH:MM",
                      "naive_timestamp")
    _library_check(time_ms, when, "at", field=field, code="invalid_timestamp")
    return when


def parse_delay(value: Any, field: str = "delay") -> timedelta:
    """Seconds (a number) or an ISO-8601 duration (``PT30S``, ``P1DT2H``), not negative."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise invalid(field, "'delay' is a number of seconds or an ISO-8601 duration",
                      "invalid_delay")
    if isinstance(value, str):
        if value.startswith("-"):
            raise invalid(field, f"the delay {value!r} is negative", "negative_delay")
        match = _DURATION.fullmatch(value)
        if match is None or value in ("P", "PT") or value.endswith("T"):
            raise invalid(field, f"{value!r} is not an ISO-8601 duration in weeks, days, "
                          "hours, minutes and seconds (such as PT30S or P1DT2H)",
                          "invalid_delay")
        parts = {k: float(v) if v else 0.0 for k, v in match.groupdict().items()}
        try:
            return timedelta(weeks=parts["w"], days=parts["d"], hours=parts["h"],
                             minutes=parts["m"], seconds=parts["s"])
        except OverflowError:
            raise invalid(field, f"the delay {value!r} is too long", "invalid_delay") from None
    # an int may have thousands of digits: isfinite() would overflow converting it to a
    # float, and the messages do not repeat it
    if isinstance(value, float) and not math.isfinite(value):
        raise invalid(field, "the delay must be a finite number", "invalid_delay")
    if value < 0:
        raise invalid(field, "the delay is negative", "negative_delay")
    try:
        return timedelta(seconds=value)
    except OverflowError:
        raise invalid(field, "the delay ends after the year 9999", "invalid_delay") from None


def _after(now: datetime, delay: timedelta, field: str) -> datetime:
    return _library_check(time_after, now, delay, "the delay", field=field,
                          code="invalid_delay")


def _library_check(check: Callable[..., T], *args: object, field: str,
                   code: str = "invalid") -> T:
    try:
        return check(*args)
    except InvalidArgumentError as exc:
        raise invalid(field, str(exc), code) from None


def int_param(request: Request, name: str, default: int, *, low: int, high: int) -> int:
    """A whole-number query parameter within [low, high]."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not re.fullmatch(r"[0-9]{1,12}", raw) or not low <= int(raw) <= high:
        raise invalid(name, f"{name} must be a whole number from {low} to {high}, "
                      f"got {raw!r}", "invalid_parameter")
    return int(raw)


class StrictUtf8:
    """ASGI middleware: refuse (400) a request whose path or query string, percent-decoded,
    is not UTF-8. The server decodes each bad byte as U+FFFD, so without it ``a%ffb`` and
    ``a%feb`` would reach the handlers as one key, ``a\ufffdb``: one client's message
    answered or overwritten as another's."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            error = _not_utf8(scope)
            if error is not None:
                await error.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _not_utf8(scope: Scope) -> ApiError | None:
    for field, raw in (("path", scope.get("raw_path")), ("query", scope.get("query_string"))):
        if raw and b"%" in raw:  # unencoded bytes beyond ASCII no server lets through
            try:
                unquote_to_bytes(raw).decode("utf-8")
            except UnicodeDecodeError as exc:
                return invalid(field, f"the {field} is not UTF-8 once percent-decoded "
                               f"(byte 0x{exc.object[exc.start]:02x}): percent-encode "
                               "text as UTF-8", "invalid_encoding")
    return None


class BodyDeadline:
    """ASGI middleware: a request's body must have arrived ``seconds`` after the request
    began, or the handler reading it gets 408 (``body_timeout``) and the connection is closed.
    Without it a client sending a byte now and then holds its connection, and the part of the
    body read so far, for as long as it likes: a few hundred such clients took the server's
    memory up by hundreds of megabytes. The body's size is bounded by the handlers
    (``read_limited``); a handler that does not read the body never waits for it."""

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.seconds
        complete = False

        async def receive_in_time() -> Message:
            nonlocal complete
            if complete:  # after the body: a disconnect, which may come whenever it comes
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise ApiError(408, "body_timeout", "the body did not arrive within "
                               f"{self.seconds:g} seconds", field="body",
                               headers={"Connection": "close"}) from None
            complete = message["type"] != "http.request" or not message.get("more_body")
            return message

        await self.app(scope, receive_in_time, send)
