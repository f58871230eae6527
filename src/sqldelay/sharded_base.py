"""What a sharded queue is, whichever front end runs it: its shards, how a key picks one, and
the bookkeeping of which shards to poll.

A sharded queue spreads one queue over several databases: each shard is a plain
``DelayedQueue`` (``AsyncDelayedQueue``), and each key lives on one shard, picked by
rendezvous hashing: every shard scores the key (blake2b of the shard's name and the key, so
the pick is the same in every process and Python version), the highest score wins. Adding a
shard moves only the keys it now wins, about 1/n of them; removing one moves only its own.

Shards are told apart by name: by default the database URL without user or password, the
table and the queue (``postgresql://db1:5432/app/delayed_queue/emails``); give a mapping of
names to queues when the same database is reached by different URLs in different processes,
since a different name is a different shard to the hash.

``previous=``: the shard list before a change, until ``sqldelay reshard`` has moved the
messages whose shard changed. A key whose shard changed is then looked up on its new shard and,
when missing there, on its old one; an offer replaces the old copy (see ``AsyncShardedQueue``),
and consumers take from the old shards too.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import sqlalchemy as sa

from .checks import check_key
from .clock import duration_ms
from .dialects import ErrorKind
from .dialects.common import chunked
from .errors import InvalidArgumentError, ShardUnavailableError
from .messages import Envelope, Message, QueueStats
from .worker_base import Rotation, is_outage

if TYPE_CHECKING:
    from .dialects import QueueDao
    from .queue_base import QueueBase

    Row = sa.Row[*tuple[Any, ...]]  # a stored row, of any columns

# the front end's queue class: DelayedQueue or AsyncDelayedQueue
_Q = TypeVar("_Q", bound="QueueBase")


def shard_name(queue: QueueBase) -> str:
    """The default name of the shard ``queue``: its database URL without driver, user or
    password, then its table and queue name."""
    url = queue.engine.url
    host = url.host or ""
    port = f":{url.port}" if url.port else ""
    return (f"{url.get_backend_name()}://{host}{port}/{url.database or ''}/"
            f"{queue.dao.table.name}/{queue.name}")


def _seed(name: str) -> hashlib.blake2b:
    """The hash state of a shard's name, to be continued with a key (length-prefixed, so no
    name and key pair can read as another)."""
    raw = name.encode("utf-8")
    return hashlib.blake2b(len(raw).to_bytes(4, "big") + raw, digest_size=8)


def shard_score(name: str, key: str) -> int:
    """The score of ``key`` on the shard named ``name``: the first 8 bytes of
    blake2b(len(name) as 4 bytes big-endian + name + key), all UTF-8, as a big-endian
    integer. The key goes to the shard with the highest score (ties: the greater name)."""
    seed = _seed(name)
    seed.update(key.encode("utf-8"))
    return int.from_bytes(seed.digest(), "big")


class Router:
    """Picks the shard of a key among ``names``, by rendezvous hashing (``shard_score``)."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = sorted(names)
        self._seeds = [(name, _seed(name)) for name in self.names]

    def route(self, key: str) -> str:
        raw = key.encode("utf-8")
        best, best_score = "", -1
        for name, seed in self._seeds:
            h = seed.copy()
            h.update(raw)
            score = int.from_bytes(h.digest(), "big")
            if score >= best_score:  # names are sorted: on a tie the greater name wins
                best, best_score = name, score
        return best


class ShardedBase(Generic[_Q]):
    """A queue spread over ``shards`` (a sequence of queues, named by ``shard_name``, or a
    mapping of names to queues); see the module docstring and ``AsyncShardedQueue``."""

    queue_class: type[_Q]  # the front end's queue class, set by each sharded class

    def __init__(self, shards: Sequence[_Q] | Mapping[str, _Q], *,
                 previous: Sequence[_Q] | Mapping[str, _Q] | None = None,
                 recheck: timedelta = timedelta(seconds=1)) -> None:
        """``recheck``: how long a shard that had nothing due is skipped by ``poll`` (at most;
        less when its next message falls due sooner); offers through this object end it."""
        self.shards = self._named(shards, "shards")
        self.previous = None if previous is None else self._named(previous, "previous")
        if duration_ms(recheck, "recheck") < 0:
            raise InvalidArgumentError("recheck must not be negative")
        self.recheck = recheck.total_seconds()
        first = next(iter(self.shards.values()))
        for name, queue in self.consumed_shards().items():
            if queue.pkind != first.pkind:
                raise InvalidArgumentError(
                    f"shard {name!r} holds queue {queue.pkind!r}, not {first.pkind!r}: every "
                    "shard must hold the same queue (name and payload type)")
        self.name = first.name
        self.pkind = first.pkind
        self.router = Router(self.shards)
        self.old_router = None if self.previous is None else Router(self.previous)
        self.rotation = Rotation(list(self.consumed_shards()), {}, 1)
        self._name_of = {id(q): name for name, q in self.consumed_shards().items()}
        self._lock = threading.Lock()  # the rotation, for producers and consumers alike

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self.shards)!r})"

    def _named(self, shards: Sequence[_Q] | Mapping[str, _Q], what: str) -> dict[str, _Q]:
        if isinstance(shards, Mapping):
            named = dict(shards)
        elif isinstance(shards, Sequence) and not isinstance(shards, str):
            named = {}
            for queue in shards:
                self._check_shard(queue, what)
                name = shard_name(queue)
                if name in named:
                    raise InvalidArgumentError(
                        f"{what}: two shards named {name!r}; give a mapping of distinct names")
                named[name] = queue
        else:
            raise InvalidArgumentError(
                f"{what} must be a sequence of {self.queue_class.__name__} or a mapping of "
                f"names to them, got {type(shards).__name__}")
        if not named:
            raise InvalidArgumentError(f"{what}: a sharded queue needs at least one shard")
        for name, queue in named.items():
            self._check_shard(queue, what)
            if not isinstance(name, str) or not name:
                raise InvalidArgumentError(f"{what}: shard names must be non-empty str, "
                                           f"got {name!r}")
        return named

    def _check_shard(self, queue: Any, what: str) -> None:
        if not isinstance(queue, self.queue_class):
            raise InvalidArgumentError(
                f"{what}: a shard must be a {self.queue_class.__name__}, got {queue!r}")

    # ---- routing -------------------------------------------------------------------------

    def route(self, key: str) -> str:
        """The name of the shard that holds ``key``."""
        check_key(key)
        return self.router.route(key)

    def split(self, messages: Sequence[Message]) -> dict[str, list[int]]:
        """The positions of ``messages`` by the name of their shard (keys checked)."""
        parts: dict[str, list[int]] = {}
        route = self.router.route
        for i, message in enumerate(messages):
            if not isinstance(message, Message):
                raise InvalidArgumentError(f"offer_many takes Message objects; item {i} is "
                                           f"{type(message).__name__}")
            check_key(message.key)
            name = route(message.key)
            if name in parts:
                parts[name].append(i)
            else:
                parts[name] = [i]
        return parts

    def moved(self, messages: Sequence[Message]) -> dict[int, str]:
        """The positions of ``messages`` whose shard changed, with their old shard's name."""
        return {i: old for i, m in enumerate(messages) if (old := self.old_route(m.key))}

    def old_route(self, key: str) -> str | None:
        """The name of the shard that held ``key`` before the change (``previous=``), when it
        is not the shard that holds it now."""
        if self.old_router is None:
            return None
        old = self.old_router.route(key)
        return None if old == self.route(key) else old

    def consumed_shards(self) -> dict[str, _Q]:
        """Every shard messages may be on: the shards, then those of ``previous`` that are
        not among them (a name is one shard: the current queue object serves it)."""
        out = dict(self.shards)
        for name, queue in (self.previous or {}).items():
            out.setdefault(name, queue)
        return out

    def shard(self, name: str) -> _Q:
        return self.shards[name] if name in self.shards else (self.previous or {})[name]

    def shard_of(self, envelope: Envelope[QueueBase]) -> str:
        """The name of the shard ``envelope`` was claimed from."""
        name = self._name_of.get(id(getattr(envelope, "queue", None)))
        if name is not None and isinstance(envelope, Envelope):
            return name
        raise InvalidArgumentError(
            f"{envelope!r} was not claimed from a shard of this sharded queue")

    # ---- faults ----------------------------------------------------------------------------

    def unavailable(self, name: str, exc: BaseException) -> ShardUnavailableError | None:
        """The error to raise for ``exc`` from shard ``name`` when it says the shard cannot be
        reached (None: another kind of error, raised as it is)."""
        if isinstance(exc, ShardUnavailableError):
            return exc
        if not is_outage(exc, [self.shard(name)]) or (
                isinstance(exc, sa.exc.DBAPIError)
                and self.shard(name).dao.classify(exc) is ErrorKind.TRANSIENT):
            return None  # a deadlock that outlived the retries is no outage
        first = (str(exc).strip().splitlines() or [""])[0]
        return ShardUnavailableError(
            f"shard {name!r} is unavailable: {type(exc).__name__}: {first}", name)

    # ---- poll bookkeeping -----------------------------------------------------------------

    def turns(self) -> list[str]:
        """The shards to try, in turn, skipping those known to have nothing due and those
        down; raises when every shard is down."""
        self.check_any_up()
        with self._lock:
            return [name for name, _ in self.rotation.turns(time.monotonic())]

    def check_any_up(self) -> None:
        """Raise ShardUnavailableError when every shard is down (in its backoff)."""
        now = time.monotonic()
        with self._lock:
            if all(self.rotation.is_down(n, now) for n in self.rotation.names):
                down = ", ".join(repr(n) for n in self.rotation.names)
                raise ShardUnavailableError(f"every shard is unavailable: {down}",
                                            self.rotation.names[0])

    def polled(self, name: str, count: int) -> None:
        with self._lock:
            self.rotation.claimed(name, count, time.monotonic())

    def nothing_due_for(self, name: str, seconds: float | None) -> None:
        """Shard ``name`` had nothing to claim, and its next message is due in ``seconds``
        (None: it is empty): skip it until then, for at most ``recheck``."""
        wait = self.recheck if seconds is None else min(self.recheck, seconds)
        with self._lock:  # due yet not claimable (paused, held by others): the next poll asks
            self.rotation.quiet(name, time.monotonic() + max(wait, 0.0))

    def offered(self, name: str) -> None:
        """This object offered to shard ``name``: poll it at the next turn."""
        with self._lock:
            self.rotation.quiet(name, 0.0)

    def failed(self, name: str) -> None:
        with self._lock:
            self.rotation.failed(name, time.monotonic())

    def reachable(self, name: str) -> None:
        with self._lock:
            self.rotation.reachable(name)


def merged_stats(parts: Sequence[QueueStats]) -> QueueStats:
    """The stats of the whole sharded queue from those of its shards."""
    ages = [p.oldest_due_age for p in parts if p.oldest_due_age is not None]
    return QueueStats(due=sum(p.due for p in parts),
                      scheduled=sum(p.scheduled for p in parts),
                      in_flight=sum(p.in_flight for p in parts),
                      oldest_due_age=max(ages) if ages else None)


# ---- resharding: moving the messages whose shard changed ------------------------------------


@dataclass(frozen=True, slots=True)
class ReshardReport:
    """What a reshard did: ``moved`` messages to their new shard, found ``already_there`` (a
    newer offer on the new shard, or a copy left by an interrupted run: the old copy was
    deleted), and ``left`` on their old shard because they were in flight (run it again)."""

    moved: int
    already_there: int
    left: int


def in_flight(row: Row, now_ms: int) -> bool:
    """Whether a stored row is claimed and its lock still holds."""
    return row.lock_uuid is not None and row.scheduled_at > now_ms


def scan_op(queue: QueueBase, after_id: int,
            limit: int) -> Callable[[sa.Connection], Sequence[Row]]:
    """Lock and read the next ``limit`` messages of ``queue`` after id ``after_id``, whole
    rows in id order (the reshard's read of its source shard)."""
    t = queue.dao.table

    def op(conn: sa.Connection) -> Sequence[Row]:
        return conn.execute(queue.dao.lock_rows(
            sa.select(t).where(t.c.pkind == queue.pkind, t.c.id > after_id).order_by(t.c.id)
            .limit(limit), t, skip=False)).all()

    return op


def copy_op(queue: QueueBase, rows: Sequence[Row]) -> Callable[[sa.Connection], int]:
    """Insert ``rows`` (read from another shard) into ``queue``'s table as they are, but for
    their id, unless their key is there already; returns how many were inserted.

    A producer may write one of the keys between the read of those there and the insert:
    the insert then meets an existing key, and the rows go one by one, each in a savepoint,
    a key that exists by then being left to the producer's newer copy."""
    t = queue.dao.table
    dao = queue.dao

    def op(conn: sa.Connection) -> int:
        keys = [r.pkey for r in rows]
        there: set[str] = set()
        for start in range(0, len(keys), dao.in_list_max):
            there.update(conn.scalars(sa.select(t.c.pkey).where(
                t.c.pkind == queue.pkind, t.c.pkey.in_(keys[start:start + dao.in_list_max]))))
        new = [{c: v for c, v in r._mapping.items() if c != "id"} for r in rows
               if r.pkey not in there]
        if new and not _inserted(conn, dao, t, new):
            new = [row for row in new if _inserted(conn, dao, t, [row])]
        if any(r["group_key"] is not None for r in new):  # claims must mind the groups
            dao.write_settings(conn, queue.pkind, has_groups=1)
        return len(new)

    return op


def _inserted(conn: sa.Connection, dao: QueueDao, t: sa.Table, rows: list[dict[str, Any]],
              ) -> bool:
    """Insert ``rows`` in a savepoint: False, and nothing inserted, where a key exists."""
    try:
        with conn.begin_nested():
            conn.execute(sa.insert(t), rows)
    except sa.exc.DBAPIError as exc:
        if dao.classify(exc) is not ErrorKind.DUPLICATE_KEY:
            raise
        return False
    return True


def delete_ids_op(queue: QueueBase, ids: Sequence[int]) -> Callable[[sa.Connection], None]:
    t = queue.dao.table

    def op(conn: sa.Connection) -> None:
        for part in chunked(ids, queue.dao.in_list_max):
            conn.execute(queue.dao.delete_by_id(t, len(part), t.c.id.in_(part)))

    return op


def keys_op(queue: QueueBase) -> Callable[[sa.Connection], list[str]]:
    t = queue.dao.table

    def op(conn: sa.Connection) -> list[str]:
        return list(conn.scalars(sa.select(t.c.pkey).where(t.c.pkind == queue.pkind)))

    return op


def count_op(queue: QueueBase) -> Callable[[sa.Connection], int]:
    t = queue.dao.table

    def op(conn: sa.Connection) -> int:
        return conn.execute(sa.select(sa.func.count()).where(t.c.pkind == queue.pkind)
                            ).scalar_one()

    return op
