"""Input checks shared by every public entry point: bad input fails here, before any I/O.

Text that ends up in a key column (keys, queue names, payload type names, cron prefixes) must
be storable and comparable alike on every supported database, so what one of them cannot
store is refused for all: a NUL character (PostgreSQL text cannot hold it; the others would
store it, so a key would work on one database and fail on another) and lone UTF-16 surrogates
(not Unicode scalar values: no driver can encode them as UTF-8 or UTF-16).

A time is stored as epoch milliseconds and read back as a UTC datetime, so it must lie within
what a datetime holds once in UTC, years 1 to 9999: ``0001-01-01T00:00+14:00`` is a valid
aware datetime, yet in UTC it falls in the year 0, and a message due then could be written
but never read back.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from .clock import to_ms
from .errors import InvalidArgumentError
from .schema import KEY_LENGTH

# the first and last millisecond a datetime holds in UTC, as epoch milliseconds
MIN_TIME_MS = to_ms(datetime.min.replace(tzinfo=UTC))
MAX_TIME_MS = to_ms(datetime.max.replace(tzinfo=UTC))

# NUL, or a surrogate code point that Python lets a str hold but no encoding accepts
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def check_text(value: Any, what: str, max_length: int) -> None:
    """``value`` is a non-empty str of at most ``max_length`` characters, all storable."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{what} must be a str, got {type(value).__name__}")
    if not value:
        raise InvalidArgumentError(f"{what} must not be empty")
    if len(value) > max_length:
        raise InvalidArgumentError(
            f"{what} is {len(value)} characters; the limit is {max_length}")
    bad = _UNSTORABLE.search(value)
    if bad is not None:
        raise InvalidArgumentError(
            f"{what} {value!r} contains {_describe(bad.group())} at position {bad.start()}, "
            "which not every supported database can store")


def check_texts(values: list[Any], what: str, max_length: int) -> None:
    """``check_text`` of each of ``values``, in one pass over them all where every one is
    fine (an ``offer_many``'s keys: half the cost of checking each); only otherwise
    each on its own, to name the first that is not."""
    if (all(type(value) is str for value in values)
            and 0 < min(map(len, values), default=1)
            and max(map(len, values), default=0) <= max_length
            and _UNSTORABLE.search("".join(values)) is None):
        return
    for value in values:
        check_text(value, what, max_length)


def check_key(key: Any) -> None:
    check_text(key, "key", KEY_LENGTH)


def check_positive_int(value: Any, name: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidArgumentError(f"{name} must be a positive integer, got {value!r}")


def time_ms(when: Any, name: str = "at") -> int:
    """``when``, an aware datetime, in epoch milliseconds; refused unless it lies within
    years 1 to 9999 once in UTC (see the module's docstring)."""
    ms = to_ms(when, name)
    if not MIN_TIME_MS <= ms <= MAX_TIME_MS:
        side = "before the year 1" if ms < MIN_TIME_MS else "after the year 9999"
        raise InvalidArgumentError(
            f"{name} {when.isoformat()} is {side} in UTC; a time must lie within the years "
            "1 to 9999 in UTC")
    return ms


def time_after(start: datetime, delay: timedelta, name: str = "delay") -> datetime:
    """``start + delay``, refused as bad input (not an ``OverflowError``) when it ends
    after the year 9999 in UTC."""
    try:
        end = start + delay
    except OverflowError:
        end = None
    if end is None or to_ms(end, name) > MAX_TIME_MS:
        raise InvalidArgumentError(
            f"{name} {delay} from {start.isoformat()} ends after the year 9999")
    return end


def storable_text(text: str) -> str:
    """Free text (an error message) made storable everywhere: unstorable characters become
    U+FFFD, the replacement character."""
    return _UNSTORABLE.sub("\ufffd", text)


def _describe(char: str) -> str:
    return "a NUL character" if char == "\x00" else f"the lone surrogate U+{ord(char):04X}"


def readable_ms(ms: int) -> int:
    """``ms`` moved to the nearest time a datetime holds: how a row stored by hand or by
    another client with a time past the years 1-9999 is shown and kept as a dead letter."""
    return min(max(int(ms), MIN_TIME_MS), MAX_TIME_MS)
