"""The REST endpoints under ``/v1``: a thin layer over the asyncio front end.

Every handler checks its input (``inputs``) before it calls the library, and the library's
own checks run before it touches the database, so a refused request writes nothing. The
service speaks JSON: its queues use the JSON serializer (payload type ``json``).
"""

from __future__ import annotations

import base64
import logging
from collections import OrderedDict
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_to_bytes

import sqlalchemy as sa
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..dead_letters_async import AsyncDeadLetters
from ..dead_letters_base import DeadLetter
from ..errors import InvalidArgumentError, PayloadError, SchemaMissingError
from ..history import History, HistoryEvent
from ..inspection_async import AsyncInspector
from ..inspection_base import STATES, QueueSummary
from ..messages import (
    NO_FLOW_CONTROL,
    FlowControl,
    Message,
    OfferOutcome,
    QueuedMessage,
    QueueStats,
)
from ..queue_async import AsyncDelayedQueue
from ..serializers import JsonSerializer
from .errors import ApiError, invalid
from .inputs import (
    BATCH_MESSAGE_FIELDS,
    MAX_OFFSET,
    int_param,
    limit_input,
    message_input,
    read_json,
)

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

JSON = JsonSerializer()
CACHED_QUEUES = 1024  # queue objects kept between requests (names come from requests)
log = logging.getLogger("sqldelay.web")


class Service:
    """What the endpoints share: the engine's queues, dead letters and inspector, and the
    limits of a request."""

    def __init__(self, engine: AsyncEngine, *, table_name: str,
                 history: bool | timedelta | History | None, max_body: int,
                 max_batch: int, actor: str | None) -> None:
        self.engine = engine
        self.table_name = table_name
        self.history = history
        self.max_body = max_body
        self.max_batch = max_batch
        self.actor = actor
        self.dead = AsyncDeadLetters(engine, table_name=table_name,
                                     history=history not in (None, False))
        self.inspector = AsyncInspector(engine, table_name=table_name)
        self._queues: OrderedDict[tuple[str, bool | timedelta | History | None],
                                  AsyncDelayedQueue] = OrderedDict()

    def queue(self, name: str) -> AsyncDelayedQueue:
        """The queue named in the path (refused with 400 when the library refuses it)."""
        return self._cached(name, self.history)

    def reader(self, name: str) -> AsyncDelayedQueue:
        """The queue named in the path, to read its history: recorded by its producers and
        workers whether or not the service's own queues record theirs (``history``)."""
        return self._cached(name, True)

    def _cached(self, name: str, history: bool | timedelta | History | None,
                ) -> AsyncDelayedQueue:
        """A queue object, kept between requests (the least recently used go first)."""
        ident = (name, history)
        queue = self._queues.get(ident)
        if queue is None:
            try:
                queue = AsyncDelayedQueue(self.engine, name, table_name=self.table_name,
                                          history=history)
            except InvalidArgumentError as exc:
                raise invalid("queue", str(exc), "invalid_queue") from None
            self._queues[ident] = queue
            if len(self._queues) > CACHED_QUEUES:
                self._queues.popitem(last=False)
        else:
            self._queues.move_to_end(ident)
        return queue

    def key(self, queue: AsyncDelayedQueue, key: str, field: str = "key") -> str:
        try:
            queue.check_key(key)
        except InvalidArgumentError as exc:
            raise invalid(field, str(exc), "invalid_key") from None
        return key

    # ---- one message ---------------------------------------------------------------------

    async def put_message(self, request: Request) -> Response:
        """Create the message if its key is absent: 201 created, 200 ignored."""
        return await self._offer(request, update=False)

    async def post_message(self, request: Request) -> Response:
        """Create or update: 201 created, 200 updated or ignored (nothing changed)."""
        return await self._offer(request, update=True)

    async def _offer(self, request: Request, *, update: bool) -> Response:
        queue = self.queue(request.path_params["queue"])
        key = self.key(queue, request.path_params["key"])
        body = await read_json(request, self.max_body)
        m = message_input(body)
        message = Message(key, m.payload, m.at, update, m.priority, m.group)
        try:
            [outcome] = await queue.offer_many([message], by=self.actor)
        except PayloadError as exc:
            raise invalid("payload", str(exc), "invalid_payload") from None
        except InvalidArgumentError as exc:  # what is left: the payload's size
            raise invalid("payload", str(exc), "invalid_payload") from None
        status = 201 if outcome is OfferOutcome.CREATED else 200
        return JSONResponse({"queue": queue.name, "key": key, "outcome": outcome.value},
                            status_code=status)

    async def get_message(self, request: Request) -> Response:
        queue = self.queue(request.path_params["queue"])
        return await self._status(queue, self.key(queue, request.path_params["key"]))

    async def _status(self, queue: AsyncDelayedQueue, key: str) -> Response:
        """The message of ``key``: in the queue, else its dead letter, else 404."""
        found = await queue.get(key)
        if found is not None:
            return JSONResponse(message_json(queue.name, found, datetime.now(UTC)))
        letters = await self.dead.list(queue.name, key=key, limit=1)
        if letters:
            return JSONResponse(dead_letter_json(letters[0]))
        raise _absent(queue.name, key)

    async def delete_message(self, request: Request) -> Response:
        """Deletes what GET shows: the message in the queue, or, when the key has none there,
        its dead letters (GET shows the oldest; after the DELETE it shows none)."""
        queue = self.queue(request.path_params["queue"])
        key = self.key(queue, request.path_params["key"])
        if await queue.drop(key, by=self.actor):
            return Response(status_code=204)
        dropped = 0
        while letters := await self.dead.list(queue.name, key=key, limit=self.max_batch):
            gone = await self.dead.drop([d.id for d in letters], by=self.actor)
            dropped += gone
            if not gone:  # dropped meanwhile by someone else
                break
        if not dropped:
            raise _absent(queue.name, key)
        return Response(status_code=204)

    async def message_history(self, request: Request) -> Response:
        """The key's events, oldest first, from the history its producers and workers
        recorded. The path of a key ending in ``/history`` reads as this one; a client reads
        that key's status with the slash before ``history`` sent as ``%2F``."""
        queue = self.reader(request.path_params["queue"])
        if not _history_asked(request):
            key = self.key(queue, request.path_params["key"] + "/history")
            return await self._status(self.queue(queue.name), key)
        key = self.key(queue, request.path_params["key"])
        try:
            events = await queue.history(key)
        except SchemaMissingError:
            assert queue.recorder is not None  # the queue keeps history: it read the table
            table = queue.recorder.table.name
            raise ApiError(404, "no_history", f"the queue table keeps no history: there is "
                           f"no table {table!r} (create_schema(engine, history=True), or "
                           "sqldelay migrate --history)") from None
        if not events and await queue.get(key) is None and not await self.dead.list(
                queue.name, key=key, limit=1):
            raise _absent(queue.name, key)
        return JSONResponse({"queue": queue.name, "key": key,
                             "events": [event_json(e) for e in events]})

    # ---- many messages -------------------------------------------------------------------

    async def post_batch(self, request: Request) -> Response:
        """Offer up to ``max_batch`` messages; outcomes in order. One bad message refuses
        the whole batch before anything is written."""
        queue = self.queue(request.path_params["queue"])
        body = await read_json(request, self.max_body)
        if not isinstance(body, dict) or set(body) != {"messages"}:
            raise invalid("messages", "the body is {\"messages\": [...]}", "invalid_batch")
        items = body["messages"]
        if not isinstance(items, list) or not items:
            raise invalid("messages", "messages is a non-empty list", "invalid_batch")
        if len(items) > self.max_batch:
            raise invalid("messages", f"a batch holds at most {self.max_batch} messages, "
                          f"got {len(items)}", "batch_too_large")
        now = datetime.now(UTC)
        messages = []
        for i, item in enumerate(items):
            where = f"messages[{i}]"
            m = message_input(item, where, allowed=BATCH_MESSAGE_FIELDS, now=now)
            if "key" not in item:
                raise invalid(f"{where}.key", "each message needs a key", "missing_field")
            key = self.key(queue, item["key"], f"{where}.key")
            update = item.get("update", True)
            if not isinstance(update, bool):
                raise invalid(f"{where}.update", "update is true or false")
            messages.append(Message(key, m.payload, m.at, update, m.priority, m.group))
        try:
            outcomes = await queue.offer_many(messages, by=self.actor)
        except InvalidArgumentError as exc:  # a payload the serializer or database refuses
            raise invalid("messages", str(exc), "invalid_payload") from None
        # 201 as soon as one was created, as for one message: RFC 9110's "one or more new
        # resources"; the outcomes say which
        status = 201 if OfferOutcome.CREATED in outcomes else 200
        return JSONResponse({"queue": queue.name, "outcomes": [o.value for o in outcomes]},
                            status_code=status)

    async def browse(self, request: Request) -> Response:
        """A page of a queue's messages in one state, in due order, by key prefix."""
        queue = self.queue(request.path_params["queue"])
        state = request.query_params.get("state", "due")
        if state not in STATES:
            raise invalid("state", f"state is one of {', '.join(STATES)}",
                          "invalid_parameter")
        limit = int_param(request, "limit", 50, low=1, high=500)
        prefix = request.query_params.get("prefix") or None
        after = request.query_params.get("after") or None
        try:
            page = await self.inspector.peek(queue.name, state, limit=limit,
                                             key_prefix=prefix, after=after)
        except InvalidArgumentError as exc:
            field = "after" if "after" in str(exc) else "prefix"
            raise invalid(field, str(exc), "invalid_parameter") from None
        now = datetime.now(UTC)
        return JSONResponse({"messages": [message_json(queue.name, m, now)
                                          for m in page.messages],
                             "next_after": page.next_after})

    # ---- queues --------------------------------------------------------------------------

    async def list_queues(self, request: Request) -> Response:
        """A page of the queues with messages or dead letters, by name prefix, with their
        pause and limits; the database cuts it, so a table of many queues is never read and
        sent whole."""
        limit = int_param(request, "limit", 50, low=1, high=500)
        prefix = request.query_params.get("prefix") or None
        after = request.query_params.get("after") or None
        try:
            page = await self.inspector.queues_page(limit=limit, after=after, prefix=prefix)
        except InvalidArgumentError as exc:
            field = "after" if str(exc).startswith("after") else "prefix"
            raise invalid(field, str(exc), "invalid_parameter") from None
        controls = await self.inspector.flow_controls(
            [(s.queue, s.type_name) for s in page.queues]) if page.queues else {}
        return JSONResponse({"queues": [summary_json(s) | control_json(
            controls.get((s.queue, s.type_name), NO_FLOW_CONTROL)) for s in page.queues],
                             "next_after": page.next_after})

    async def get_queue(self, request: Request) -> Response:
        """The queue's counts and flow control; 404 for a queue with no messages, no dead
        letters, no pause and no limits, which no producer or operator has used."""
        queue = self.queue(request.path_params["queue"])
        found = await self.queue_json(queue)
        if not any(found[n] for n in ("due", "scheduled", "in_flight", "dead_letters",
                                      "paused", "rate_limit", "concurrency_limit")):
            raise ApiError(404, "not_found", f"no queue {queue.name!r}: it has no messages, "
                           "dead letters, pause or limits", field="queue")
        return JSONResponse(found)

    async def queue_json(self, queue: AsyncDelayedQueue) -> dict[str, Any]:
        stats = await queue.stats()
        control = await queue.flow_control()
        dead = await self.dead.count(queue.name)
        return {"queue": queue.name, **stats_json(stats), "dead_letters": dead,
                **control_json(control)}

    # ---- flow control: stored in the database, obeyed by every consumer -------------------

    async def pause(self, request: Request) -> Response:
        queue = self.queue(request.path_params["queue"])
        await queue.pause()
        return JSONResponse(await self.queue_json(queue))

    async def resume(self, request: Request) -> Response:
        queue = self.queue(request.path_params["queue"])
        await queue.resume()
        return JSONResponse(await self.queue_json(queue))

    async def set_rate_limit(self, request: Request) -> Response:
        """``{"limit": n, "per_seconds": s}``: at most n claims per s seconds (default 1), by
        every consumer together."""
        queue = self.queue(request.path_params["queue"])
        limit, per = limit_input(await read_json(request, self.max_body), rate=True)
        await queue.set_rate_limit(limit, per=per)
        return JSONResponse(await self.queue_json(queue))

    async def set_concurrency_limit(self, request: Request) -> Response:
        """``{"limit": n}``: at most n messages of the queue in flight at once."""
        queue = self.queue(request.path_params["queue"])
        limit, _ = limit_input(await read_json(request, self.max_body), rate=False)
        await queue.set_concurrency_limit(limit)
        return JSONResponse(await self.queue_json(queue))

    async def lift_rate_limit(self, request: Request) -> Response:
        queue = self.queue(request.path_params["queue"])
        await queue.set_rate_limit(None)
        return JSONResponse(await self.queue_json(queue))

    async def lift_concurrency_limit(self, request: Request) -> Response:
        queue = self.queue(request.path_params["queue"])
        await queue.set_concurrency_limit(None)
        return JSONResponse(await self.queue_json(queue))

    # ---- dead letters --------------------------------------------------------------------

    async def list_dead_letters(self, request: Request) -> Response:
        queue = self.queue(request.path_params["queue"])
        limit = int_param(request, "limit", 50, low=1, high=500)
        offset = int_param(request, "offset", 0, low=0, high=MAX_OFFSET)
        letters = await self.dead.list(queue.name, limit=limit, offset=offset)
        total = await self.dead.count(queue.name)
        return JSONResponse({"dead_letters": [dead_letter_json(d) for d in letters],
                             "total": total, "offset": offset, "limit": limit})

    async def requeue_dead_letters(self, request: Request) -> Response:
        queue, ids = await self._letters(request)
        return JSONResponse({"requeued": await self.dead.requeue(ids, by=self.actor)
                             if ids else 0})

    async def drop_dead_letters(self, request: Request) -> Response:
        queue, ids = await self._letters(request)
        return JSONResponse({"dropped": await self.dead.drop(ids, by=self.actor)
                             if ids else 0})

    async def _letters(self, request: Request) -> tuple[AsyncDelayedQueue, list[int]]:
        """The dead letters a requeue or drop names: ``{"ids": [...]}`` or ``{"all": true}``,
        each of this queue (an id of another queue is refused: 404)."""
        queue = self.queue(request.path_params["queue"])
        body = await read_json(request, self.max_body)
        if not isinstance(body, dict) or len(body) != 1 or not ({"ids", "all"} & set(body)):
            raise invalid("ids", "the body is {\"ids\": [1, 2]} or {\"all\": true}",
                          "invalid_selection")
        known = set(await self.dead.ids(queue.name))
        if "all" in body:
            if body["all"] is not True:
                raise invalid("all", "all is true", "invalid_selection")
            return queue, sorted(known)
        ids = body["ids"]
        if (not isinstance(ids, list) or not ids or len(ids) > self.max_batch
                or any(not isinstance(i, int) or isinstance(i, bool) for i in ids)):
            raise invalid("ids", f"ids is a list of 1 to {self.max_batch} dead-letter ids "
                          "(integers)", "invalid_selection")
        unknown = sorted(set(ids) - known)
        if unknown:
            raise ApiError(404, "not_found", f"queue {queue.name!r} has no dead letter "
                           f"{unknown[0]}", field="ids")
        return queue, sorted(set(ids))

    # ---- the service ---------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        """200 when the database answers, 503 when it does not. Served without a token, for
        load balancers: it tells nothing but that (the reason goes to the log)."""
        try:
            async with self.engine.connect() as conn:
                await conn.execute(sa.select(1))
        except Exception as exc:  # any failure to reach the database is the answer
            log.warning("health: the database did not answer (%s)", type(exc).__name__)
            return JSONResponse({"status": "unavailable", "database": "unavailable"},
                                status_code=503)
        return JSONResponse({"status": "ok", "database": "ok"})

    def routes(self) -> list[Route]:
        q = "/v1/queues/{queue}"
        return [
            Route("/v1/health", self.health, methods=["GET"]),
            Route("/v1/queues", self.list_queues, methods=["GET"]),
            Route(q, self.get_queue, methods=["GET"]),
            Route(q + "/pause", self.pause, methods=["POST"]),
            Route(q + "/resume", self.resume, methods=["POST"]),
            Route(q + "/rate-limit", self.set_rate_limit, methods=["PUT"]),
            Route(q + "/rate-limit", self.lift_rate_limit, methods=["DELETE"]),
            Route(q + "/concurrency-limit", self.set_concurrency_limit, methods=["PUT"]),
            Route(q + "/concurrency-limit", self.lift_concurrency_limit, methods=["DELETE"]),
            Route(q + "/messages", self.post_batch, methods=["POST"]),
            Route(q + "/messages", self.browse, methods=["GET"]),
            # before the message's routes, whose key may hold slashes (message_history)
            Route(q + "/messages/{key:path}/history", self.message_history, methods=["GET"]),
            Route(q + "/messages/{key:path}", self.put_message, methods=["PUT"]),
            Route(q + "/messages/{key:path}", self.post_message, methods=["POST"]),
            Route(q + "/messages/{key:path}", self.get_message, methods=["GET"]),
            Route(q + "/messages/{key:path}", self.delete_message, methods=["DELETE"]),
            Route(q + "/dead-letters", self.list_dead_letters, methods=["GET"]),
            Route(q + "/dead-letters/requeue", self.requeue_dead_letters, methods=["POST"]),
            Route(q + "/dead-letters/drop", self.drop_dead_letters, methods=["POST"]),
        ]


def _history_asked(request: Request) -> bool:
    """Whether the path asks for a history: it ends in ``/history`` as sent, not in
    ``%2Fhistory`` (a key of that name, whose slash the server has decoded)."""
    raw = request.scope.get("raw_path")
    return raw is None or unquote_to_bytes(raw.rpartition(b"/")[2]) == b"history"


def _absent(queue: str, key: str) -> ApiError:
    return ApiError(404, "not_found", f"queue {queue!r} has no message {key!r}", field="key")


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _seconds(delta: timedelta | None) -> float | None:
    return None if delta is None else delta.total_seconds()


def message_json(queue: str, m: QueuedMessage, now: datetime) -> dict[str, Any]:
    """A stored message: ``due_at`` is when it may next be claimed (a retry's time while it
    waits for one, the lock's expiry while in flight), ``scheduled_at`` the producer's."""
    if m.in_flight:
        state = "in_flight"
    else:
        assert m.next_due is not None  # set on every message read from the table
        state = "due" if m.next_due <= now else "scheduled"
    out = {"queue": queue, "key": m.key, "state": state, "payload": m.payload,
           "due_at": _iso(m.next_due), "scheduled_at": _iso(m.scheduled_at),
           "created_at": _iso(m.created_at),
           "attempt": m.deliveries, "priority": m.priority, "group": m.group,
           "locked_until": _iso(m.locked_until), "claimed_by": m.claimed_by,
           "enqueued_by": m.enqueued_by,
           # QueuedMessage does not carry the stored trace context yet (null until it does)
           "trace_context": m.trace_context}
    if m.unreadable is not None:  # stored by hand or by another client: shown, not a 500
        out["unreadable"] = m.unreadable
    return out


def dead_letter_json(d: DeadLetter) -> dict[str, Any]:
    out = {"queue": d.queue, "key": d.key, "state": "dead_lettered", "id": d.id,
           "attempts": d.attempts, "last_error": d.last_error, "failed_at": _iso(d.failed_at),
           "due_at": _iso(d.scheduled_at), "created_at": _iso(d.created_at),
           "priority": d.priority, "group": d.group, "enqueued_by": d.enqueued_by}
    if d.type_name == JSON.type_name:
        out["payload"] = JSON.decode(d.payload)
    else:  # a queue of another payload type: its bytes as they are
        out["payload_base64"] = base64.b64encode(d.payload).decode()
    return out


def event_json(e: HistoryEvent) -> dict[str, Any]:
    return {"at": _iso(e.at), "event": e.kind.value, "actor": e.actor, "attempt": e.attempt,
            "detail": e.detail}


def stats_json(s: QueueStats) -> dict[str, Any]:
    return {"due": s.due, "scheduled": s.scheduled, "in_flight": s.in_flight,
            "oldest_due_age_seconds": _seconds(s.oldest_due_age)}


def summary_json(s: QueueSummary) -> dict[str, Any]:
    return {"queue": s.queue, "payload_type": s.type_name, "due": s.due,
            "scheduled": s.scheduled, "in_flight": s.in_flight,
            "dead_letters": s.dead_letters,
            "oldest_due_age_seconds": _seconds(s.oldest_due_age)}


def control_json(c: FlowControl) -> dict[str, Any]:
    return {"paused": c.paused, "rate_limit": c.rate_limit,
            "rate_period_seconds": _seconds(c.rate_period),
            "concurrency_limit": c.concurrency_limit}
