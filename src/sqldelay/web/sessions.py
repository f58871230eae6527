"""What the service remembers between requests, in this process's memory only: the dashboard's
sign-ins, and the wrong tokens each client address has sent.

Both are lost when the process restarts (a browser then signs in again, and an address's
count of wrong tokens starts afresh) and are not shared between processes: several processes
behind one address need sticky sessions. Both are bounded, whatever clients send.
"""

from __future__ import annotations

import hmac
import math
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

SESSION_LIFETIME = 12 * 3600.0  # seconds from sign-in
MAX_SESSIONS = 10_000  # the oldest sign-in is forgotten beyond this
WRONG_TOKENS_FREE = 20  # wrong tokens an address may send at once before it must wait
WRONG_TOKEN_EVERY = 3.0  # seconds: the pace of wrong tokens an address is then held to
MAX_ADDRESSES = 10_000  # addresses whose wrong tokens are remembered


@dataclass(frozen=True, slots=True)
class Session:
    id: str  # the cookie's value
    role: str
    csrf: str
    expires: float


class Sessions:
    """The dashboard's sign-ins: a random id (the cookie's value) to the role it was opened
    with and its CSRF token. The cookie holds no token, so signing out (``close``) revokes
    the session for every copy of the cookie."""

    def __init__(self, *, lifetime: float = SESSION_LIFETIME, most: int = MAX_SESSIONS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._lifetime = lifetime
        self._most = most
        self._clock = clock
        self._open: OrderedDict[str, Session] = OrderedDict()

    def open(self, role: str) -> str:
        """A new session of ``role``: its id."""
        sid = secrets.token_urlsafe(32)
        self._open[sid] = Session(sid, role, secrets.token_urlsafe(32),
                                  self._clock() + self._lifetime)
        while len(self._open) > self._most:
            self._open.popitem(last=False)
        return sid

    def get(self, sid: str | None) -> Session | None:
        """The open session of that id (None: unknown, expired or closed)."""
        if not sid:
            return None
        found = self._open.get(sid)
        if found is not None and found.expires <= self._clock():
            del self._open[sid]
            return None
        return found

    def close(self, session: Session | None) -> None:
        if session is not None:
            self._open.pop(session.id, None)

    @staticmethod
    def csrf_matches(session: Session, given: str | None) -> bool:
        return hmac.compare_digest((given or "").encode(), session.csrf.encode())


class Throttle:
    """Wrong tokens per client address, as a leaky bucket: an address may send
    ``free`` wrong tokens at once, then one every ``every`` seconds; until then, its tokens
    (right or wrong) are not checked and ``wait`` says how long it has to wait. A wait is
    never longer than ``every``: a delay, not a lockout an attacker could impose for long on
    other clients behind the same address."""

    def __init__(self, *, free: int = WRONG_TOKENS_FREE, every: float = WRONG_TOKEN_EVERY,
                 most: int = MAX_ADDRESSES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._free = free
        self._every = every
        self._most = most
        self._clock = clock
        self._level: OrderedDict[str, tuple[float, float]] = OrderedDict()  # level, at

    def _now_level(self, address: str, now: float) -> float:
        level, at = self._level.get(address, (0.0, now))
        return max(0.0, level - (now - at) / self._every)

    def wait(self, address: str | None) -> float:
        """Seconds before a token from ``address`` is checked again (0: now)."""
        if address is None or address not in self._level:
            return 0.0
        # after ``free`` wrong tokens, the next one waits until one has leaked out
        over = self._now_level(address, self._clock()) - (self._free - 1)
        return over * self._every if over > 0 else 0.0

    def failed(self, address: str | None) -> None:
        """``address`` sent a wrong token."""
        if address is None:
            return
        now = self._clock()
        self._level[address] = (self._now_level(address, now) + 1, now)
        self._level.move_to_end(address)
        while len(self._level) > self._most:
            self._level.popitem(last=False)

    @staticmethod
    def retry_after(wait: float) -> str:
        return str(max(1, math.ceil(wait)))
