"""The OpenAPI 3.1 document of the REST API, served at ``/v1/openapi.json``.

Written out here, beside the routes it describes; the tests keep it true: every route is in it
and every path in it is a route, and a property-based run (schemathesis) checks each response
against it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..history import EventKind
from ..inspection_base import AFTER_PATTERN
from ..queue_base import MAX_LIMIT, MAX_PRIORITY, MAX_QUEUE_NAME, MIN_PRIORITY
from ..schema import KEY_LENGTH, KIND_LENGTH
from .inputs import MAX_OFFSET, MAX_PERIOD, MIN_PERIOD

# an ISO-8601 duration as the server takes it (``inputs.parse_delay``): [0-9], as \d matches
# other scripts' digits in some validators' regular expressions; at least one part after P,
# and after T when there is one ("P", "PT" and "P1DT" are refused)
DURATION_PATTERN = (r"^P(?!$)([0-9]+W)?([0-9]+D)?(T(?=[0-9])([0-9]+H)?([0-9]+M)?"
                    r"([0-9]+(\.[0-9]+)?S)?)?$")


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Any]:
    """The error responses of an operation: those every one may answer, and ``statuses``."""
    every = {400, 401, 403, 404, 429, 503}
    if 413 in statuses:  # a body: too large, or too slow to arrive
        statuses = (*statuses, 408)
    return {str(s): {"$ref": f"#/components/responses/{_ERROR_NAMES[s]}"}
            for s in sorted(every | set(statuses))}


_ERROR_NAMES = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
                408: "TooSlow", 409: "Unsupported", 413: "TooLarge", 429: "TooManyAttempts",
                503: "Unavailable"}

_NULLABLE_TIME = {"type": ["string", "null"], "format": "date-time"}
_NULLABLE_SECONDS = {"type": ["number", "null"]}


def openapi_document(*, max_body: int, max_batch: int) -> dict[str, Any]:
    """The document, with this service's limits in it."""
    queue = {"name": "queue", "in": "path", "required": True,
             "schema": {"type": "string", "minLength": 1, "maxLength": MAX_QUEUE_NAME}}
    key = {"name": "key", "in": "path", "required": True,
           "schema": {"type": "string", "minLength": 1, "maxLength": KEY_LENGTH}}
    due = {"at": {"type": "string", "format": "date-time",
                  "description": "RFC 3339 due time with its offset"},
           "delay": {"oneOf": [{"type": "number", "minimum": 0},
                               {"type": "string", "pattern": DURATION_PATTERN}],
                     "description": "seconds, or an ISO-8601 duration (PT30S, P1DT2H)"},
           "priority": {"type": "integer", "minimum": MIN_PRIORITY, "maximum": MAX_PRIORITY,
                        "default": 0},
           "group": {"type": "string", "minLength": 1, "maxLength": KEY_LENGTH}}
    message_in = {"type": "object", "required": ["payload"], "additionalProperties": False,
                  "properties": {"payload": {"description": "any JSON value"}, **due},
                  "description": "due now without 'at' or 'delay'; not both"}
    batch_item = {"type": "object", "required": ["key", "payload"],
                  "additionalProperties": False,
                  "properties": {"key": {"type": "string", "minLength": 1,
                                         "maxLength": KEY_LENGTH},
                                 "payload": {}, "update": {"type": "boolean", "default": True},
                                 **due}}
    selection = {"oneOf": [
        {"type": "object", "required": ["ids"], "additionalProperties": False,
         "properties": {"ids": {"type": "array", "minItems": 1, "maxItems": max_batch,
                                "items": {"type": "integer"}}}},
        {"type": "object", "required": ["all"], "additionalProperties": False,
         "properties": {"all": {"const": True}}}]}
    counts = {"due": {"type": "integer"}, "scheduled": {"type": "integer"},
              "in_flight": {"type": "integer"}, "dead_letters": {"type": "integer"},
              "oldest_due_age_seconds": _NULLABLE_SECONDS}
    control = {"paused": {"type": "boolean"},
               "rate_limit": {"type": ["integer", "null"],
                              "description": "claims allowed per rate period; null: no limit"},
               "rate_period_seconds": _NULLABLE_SECONDS,
               "concurrency_limit": {"type": ["integer", "null"],
                                     "description": "messages in flight at once; null: no "
                                                    "limit"}}
    limit = {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}
    schemas = {
        "Error": {"type": "object", "required": ["error"], "properties": {"error": {
            "type": "object", "required": ["code", "message"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"},
                           "field": {"type": "string"}}}}},
        "MessageIn": message_in,
        "BatchIn": {"type": "object", "required": ["messages"], "additionalProperties": False,
                    "properties": {"messages": {"type": "array", "minItems": 1,
                                                "maxItems": max_batch, "items": batch_item}}},
        "Outcome": {"type": "object", "required": ["queue", "key", "outcome"], "properties": {
            "queue": {"type": "string"}, "key": {"type": "string"},
            "outcome": {"enum": ["created", "updated", "ignored"]}}},
        "Outcomes": {"type": "object", "required": ["queue", "outcomes"], "properties": {
            "queue": {"type": "string"},
            "outcomes": {"type": "array", "items": {"enum": ["created", "updated",
                                                             "ignored"]}}}},
        "Message": {"type": "object", "required": ["queue", "key", "state", "payload",
                                                   "due_at", "attempt"], "properties": {
            "queue": {"type": "string"}, "key": {"type": "string"},
            "state": {"enum": ["due", "scheduled", "in_flight"]}, "payload": {},
            "due_at": {"type": "string", "format": "date-time",
                       "description": "when it may next be claimed: a retry's time while "
                                      "one waits, the lock's expiry while in flight"},
            "scheduled_at": {"type": "string", "format": "date-time",
                             "description": "the due time its producer asked for"},
            "created_at": {"type": "string", "format": "date-time"},
            "attempt": {"type": "integer", "description": "deliveries so far"},
            "priority": {"type": "integer"}, "group": {"type": ["string", "null"]},
            "locked_until": _NULLABLE_TIME, "claimed_by": {"type": ["string", "null"]},
            "enqueued_by": {"type": ["string", "null"]},
            "trace_context": {"type": ["string", "null"],
                              "description": "the producer's trace context (W3C "
                                             "traceparent), stored by a traced offer"},
            "unreadable": {"type": "string",
                           "description": "present when the stored row cannot be read "
                                          "(written by hand or by another client): why; "
                                          "its payload is then null"}}},
        "DeadLetter": {"type": "object", "required": ["queue", "key", "state", "id",
                                                      "attempts", "last_error", "failed_at"],
                       "properties": {
            "queue": {"type": "string"}, "key": {"type": "string"},
            "state": {"const": "dead_lettered"}, "id": {"type": "integer"},
            "attempts": {"type": "integer"}, "last_error": {"type": "string"},
            "failed_at": {"type": "string", "format": "date-time"},
            "due_at": {"type": "string", "format": "date-time"},
            "created_at": {"type": "string", "format": "date-time"},
            "priority": {"type": "integer"}, "group": {"type": ["string", "null"]},
            "enqueued_by": {"type": ["string", "null"]}, "payload": {},
            "payload_base64": {"type": "string",
                               "description": "a payload of another type than JSON"}}},
        "Status": {"oneOf": [_ref("Message"), _ref("DeadLetter")]},
        "Page": {"type": "object", "required": ["messages", "next_after"], "properties": {
            "messages": {"type": "array", "items": _ref("Message")},
            "next_after": {"type": ["string", "null"],
                           "description": "'after' of the next page; null on the last"}}},
        "DeadLetterPage": {"type": "object", "required": ["dead_letters", "total"],
                           "properties": {
            "dead_letters": {"type": "array", "items": _ref("DeadLetter")},
            "total": {"type": "integer"}, "offset": {"type": "integer"},
            "limit": {"type": "integer"}}},
        "QueueSummary": {"type": "object",
                         "required": ["queue", "payload_type", *counts, *control],
                         "properties": {"queue": {"type": "string"},
                                        "payload_type": {"type": "string"}, **counts,
                                        **control}},
        "Queues": {"type": "object", "required": ["queues", "next_after"], "properties": {
            "queues": {"type": "array", "items": _ref("QueueSummary")},
            "next_after": {"type": ["string", "null"],
                           "description": "'after' of the next page; null on the last"}}},
        "Queue": {"type": "object", "required": ["queue", *counts, *control], "properties": {
            "queue": {"type": "string"}, **counts, **control}},
        "RateLimitIn": {"type": "object", "required": ["limit"], "additionalProperties": False,
                        "properties": {"limit": limit, "per_seconds": {
                            "type": "number", "minimum": MIN_PERIOD, "maximum": MAX_PERIOD,
                            "default": 1, "description": "the period, in seconds"}}},
        "ConcurrencyLimitIn": {"type": "object", "required": ["limit"],
                               "additionalProperties": False,
                               "properties": {"limit": limit}},
        "Event": {"type": "object", "required": ["at", "event", "actor", "attempt", "detail"],
                  "properties": {
            "at": {"type": "string", "format": "date-time"},
            "event": {"enum": [k.value for k in EventKind]},
            "actor": {"type": ["string", "null"], "description": "who did it"},
            "attempt": {"type": ["integer", "null"],
                        "description": "the delivery it happened at, where one applies"},
            "detail": {"type": ["string", "null"],
                       "description": "a due time, a lock's expiry, an error (its first line "
                                      "the error's message, then its traceback)"}}},
        "History": {"type": "object", "required": ["queue", "key", "events"], "properties": {
            "queue": {"type": "string"}, "key": {"type": "string"},
            "events": {"type": "array", "items": _ref("Event"),
                       "description": "oldest first, across re-offers of the key"}}},
        "Count": {"type": "object", "minProperties": 1, "maxProperties": 1,
                  "additionalProperties": {"type": "integer"}},
        "Throughput": {"type": "object", "required": ["every_seconds", "problem", "since",
                                                      "minute", "queues"],
                       "properties": {
            "every_seconds": {"type": "number"}, "problem": {"type": ["string", "null"]},
            "since": {"type": ["integer", "null"],
                      "description": "the first minute (epoch ms) counted whole; null: not "
                                     "sampled yet"},
            "minute": {"type": ["integer", "null"],
                       "description": "the minute (epoch ms) of the last sample, counted so "
                                      "far; null: not sampled yet"},
            "queues": {"type": "object", "description": "per queue (name|payload type)",
                       "additionalProperties": {"type": "array", "items": {
                           "type": "array", "minItems": 3, "maxItems": 3,
                           "items": {"type": "integer"},
                           "description": "[minute (epoch ms), offered, acked]"}}}}},
        "Health": {"type": "object", "required": ["status", "database"], "properties": {
            "status": {"enum": ["ok", "unavailable"]},
            "database": {"enum": ["ok", "unavailable"]}}},
    }
    responses = {name: _json(_ref("Error"), text) for name, text in (
        ("BadRequest", "bad input; nothing was written"), ("Unauthorized", "no valid token"),
        ("Forbidden", "the read-only token, or a cross-site change"),
        ("NotFound", "no such message, dead letter, queue, history or route"),
        ("TooLarge", f"the body is over {max_body:,} bytes"),
        ("TooSlow", "the body did not arrive in time"),
        ("Unsupported", "the database cannot keep this setting (a concurrency limit on a "
         "Galera cluster); nothing was written"),
        ("TooManyAttempts", "this address sent too many wrong tokens; wait Retry-After "
         "seconds"),
        ("Unavailable", "the database is unreachable or has no queue table"))}

    def op(summary: str, ok: dict[str, Any], *, body: dict[str, Any] | None = None,
           params: Iterable[dict[str, Any]] = (), errors: Iterable[int] = ()) -> dict[str, Any]:
        out = {"summary": summary, "parameters": list(params), "responses": {**ok,
                                                                           **_errors(*errors)}}
        if body is not None:
            out["requestBody"] = {"required": True,
                                  "content": {"application/json": {"schema": body}}}
        return out

    page_params = [{"name": "limit", "in": "query",
                    "schema": {"type": "integer", "minimum": 1, "maximum": 500}}]
    offered = {"201": _json(_ref("Outcome"), "created"),
               "200": _json(_ref("Outcome"), "updated, or ignored (nothing changed)")}
    message_path = {
        "put": op("Create the message if its key is absent", {
            "201": _json(_ref("Outcome"), "created"),
            "200": _json(_ref("Outcome"), "ignored: the key exists")},
            body=_ref("MessageIn"), params=[queue, key], errors=[413]),
        "post": op("Create or update the message", offered, body=_ref("MessageIn"),
                   params=[queue, key], errors=[413]),
        "get": op("The message's status", {"200": _json(_ref("Status"), "its status")},
                  params=[queue, key]),
        "delete": op("Delete what GET shows: the message, or the key's dead letters when "
                     "it has no message in the queue", {"204": {"description": "deleted"}},
                     params=[queue, key]),
    }
    queue_ok = _json(_ref("Queue"), "the queue, as it is now")
    return {
        "openapi": "3.1.0",
        "info": {"title": "sqldelay", "version": "1",
                 "description": "A durable delayed message queue over HTTP"},
        "security": [{"bearer": []}],
        "paths": {
            "/v1/health": {"get": {
                "summary": "Whether the database answers; served without a token",
                "security": [], "parameters": [],
                "responses": {"200": _json(_ref("Health"), "it does"),
                              "503": _json(_ref("Health"), "it does not")}}},
            "/v1/openapi.json": {"get": op("This document", {
                "200": _json({"type": "object"}, "the document")})},
            "/v1/throughput": {"get": op("Offered and acked per minute, as sampled", {
                "200": _json(_ref("Throughput"), "the samples")})},
            "/v1/queues": {"get": op("A page of the table's queues with their counts, in "
                                     "the database's order of 'name|payload type'", {
                "200": _json(_ref("Queues"), "the queues")}, params=[
                *page_params, {"name": "prefix", "in": "query",
                               "schema": {"type": "string", "maxLength": MAX_QUEUE_NAME}},
                {"name": "after", "in": "query",
                 "schema": {"type": "string", "maxLength": KIND_LENGTH}}])},
            "/v1/queues/{queue}": {"get": op(
                "A queue's counts and flow control (404: no messages, dead letters, pause or "
                "limits)", {"200": _json(_ref("Queue"), "the queue")}, params=[queue])},
            "/v1/queues/{queue}/pause": {"post": op("Stop claims from the queue", {
                "200": _json(_ref("Queue"), "paused")}, params=[queue])},
            "/v1/queues/{queue}/resume": {"post": op("Let claims go on", {
                "200": _json(_ref("Queue"), "resumed")}, params=[queue])},
            "/v1/queues/{queue}/rate-limit": {
                "put": op("At most 'limit' claims per 'per_seconds', by every consumer "
                          "together", {"200": queue_ok}, body=_ref("RateLimitIn"),
                          params=[queue], errors=[413]),
                "delete": op("Lift the rate limit", {"200": queue_ok}, params=[queue])},
            "/v1/queues/{queue}/concurrency-limit": {
                "put": op("At most 'limit' messages of the queue in flight at once",
                          {"200": queue_ok}, body=_ref("ConcurrencyLimitIn"), params=[queue],
                          errors=[409, 413]),
                "delete": op("Lift the concurrency limit", {"200": queue_ok},
                             params=[queue])},
            "/v1/queues/{queue}/messages": {
                "post": op("Offer a batch of messages, all or none", {
                    "201": _json(_ref("Outcomes"), "one or more created; the outcomes, in "
                                 "order"),
                    "200": _json(_ref("Outcomes"), "none created (updated or ignored); the "
                                 "outcomes, in order")},
                    body=_ref("BatchIn"), params=[queue], errors=[413]),
                "get": op("A page of the queue's messages in one state", {
                    "200": _json(_ref("Page"), "the page")}, params=[
                    queue, {"name": "state", "in": "query",
                            "schema": {"enum": ["due", "scheduled", "in_flight"]}},
                    {"name": "prefix", "in": "query",
                     "schema": {"type": "string", "maxLength": KEY_LENGTH}},
                    {"name": "after", "in": "query",
                     "schema": {"type": "string", "pattern": AFTER_PATTERN}},
                    *page_params])},
            "/v1/queues/{queue}/messages/{key}": message_path,
            "/v1/queues/{queue}/messages/{key}/history": {"get": op(
                "The key's events, oldest first, from the queue table's history (404 "
                "'no_history' without one). A key that itself ends in '/history' is read "
                "by GET /v1/queues/{queue}/messages/{key} with that last slash sent as %2F",
                {"200": _json(_ref("History"), "its timeline")}, params=[queue, key])},
            "/v1/queues/{queue}/dead-letters": {"get": op("A page of the queue's dead letters", {
                "200": _json(_ref("DeadLetterPage"), "the page")}, params=[
                queue, *page_params, {"name": "offset", "in": "query",
                                      "schema": {"type": "integer", "minimum": 0,
                                                 "maximum": MAX_OFFSET}}])},
            "/v1/queues/{queue}/dead-letters/requeue": {"post": op(
                "Put dead letters back in the queue, due now", {
                    "200": _json(_ref("Count"), "how many went back ('requeued')")},
                body=selection, params=[queue], errors=[413])},
            "/v1/queues/{queue}/dead-letters/drop": {"post": op(
                "Delete dead letters for good", {
                    "200": _json(_ref("Count"), "how many were deleted ('dropped')")},
                body=selection, params=[queue], errors=[413])},
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": schemas,
            "responses": responses,
        },
    }
