"""Payload serializers: objects <-> bytes, each with a type name stored beside the queue name.

The type name is part of the queue's partition (``pkind``), so a queue that reads JSON never
sees rows written by a queue of the same name that writes raw bytes.
"""

from __future__ import annotations

import json
from typing import Any, Protocol, runtime_checkable

from .errors import PayloadError


@runtime_checkable
class Serializer(Protocol):
    """What a custom serializer implements."""

    type_name: str

    def encode(self, payload: Any) -> bytes: ...

    def decode(self, data: bytes) -> Any: ...


def _c_encoder_for(encoder: json.JSONEncoder) -> Any:
    """The C encoder JSONEncoder.encode builds for ``encoder`` (compact, keys sorted, no NaN,
    not ASCII-only), without the dict it finds circular references with; None where this
    interpreter builds none."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    try:
        return make(None, encoder.default, json.encoder.encode_basestring, None, ":", ",",
                    True, False, False)
    except TypeError:  # an interpreter whose C encoder takes other arguments
        return None


class JsonSerializer:
    """JSON with sorted keys: equal objects encode to equal bytes, so offer can tell 'unchanged'."""

    type_name = "json"

    # one encoder for every call: json.dumps with options builds a new one each time, which
    # was half the cost of encoding a small payload
    _encoder = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                                allow_nan=False)
    # and the C encoder under it, also built once: JSONEncoder.encode builds one per call,
    # with a dict to find circular references in, which was two thirds of the cost of
    # encoding {"job": "noop"} (1.3 µs, 0.45 µs this way; same bytes). Without that dict a
    # payload that contains itself fails on the recursion limit, refused below all the same.
    # (None where the interpreter has no C encoder, or one that takes other arguments.)
    _c_encoder = _c_encoder_for(_encoder)

    def encode(self, payload: Any) -> bytes:
        try:
            if self._c_encoder is None or isinstance(payload, str):
                text = self._encoder.encode(payload)
            else:
                text = "".join(self._c_encoder(payload, 0))
        except (TypeError, ValueError) as exc:
            raise PayloadError(f"payload is not JSON-serializable: {exc}") from exc
        except RecursionError as exc:
            raise PayloadError("payload is not JSON-serializable: it contains itself, or is "
                               "nested deeper than the recursion limit") from exc
        return text.encode("utf-8")

    _decoder = json.JSONDecoder()

    def decode(self, data: bytes) -> Any:
        # what this serializer wrote is UTF-8 text: decoded so, it skips json.loads' sniffing
        # of the encoding (1.7 µs for {"job": "noop"}, 0.9 µs this way); anything else takes
        # json.loads, which reads it or raises as it always did
        try:
            return self._decoder.decode(str(data, "utf-8"))
        except ValueError:  # not UTF-8, or not JSON read as such
            return json.loads(data)


class BytesSerializer:
    type_name = "bytes"

    def encode(self, payload: Any) -> bytes:
        if not isinstance(payload, bytes | bytearray | memoryview):
            raise PayloadError(f"BytesSerializer needs bytes, got {type(payload).__name__}")
        return bytes(payload)

    def decode(self, data: bytes) -> bytes:
        return bytes(data)


class StrSerializer:
    type_name = "str"

    def encode(self, payload: Any) -> bytes:
        if not isinstance(payload, str):
            raise PayloadError(f"StrSerializer needs str, got {type(payload).__name__}")
        try:
            return payload.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise PayloadError(f"payload is not encodable as UTF-8: {exc}") from exc

    def decode(self, data: bytes) -> str:
        return bytes(data).decode("utf-8")


# the built-in serializers by type name, as the CLI and the Spark integration name them
SERIALIZERS: dict[str, type[Serializer]] = {
    cls.type_name: cls for cls in (JsonSerializer, StrSerializer, BytesSerializer)}


def encode_payload(serializer: Serializer, payload: Any) -> bytes:
    """Encode and check the result, so a broken custom serializer fails before any write."""
    try:
        data = serializer.encode(payload)
    except PayloadError:
        raise
    except Exception as exc:  # a custom serializer may raise anything
        raise PayloadError(f"{type(serializer).__name__} cannot encode the payload: {exc}") from exc
    if not isinstance(data, bytes):
        raise PayloadError(
            f"{type(serializer).__name__}.encode returned {type(data).__name__}, not bytes"
        )
    if not data:
        # Oracle stores a zero-length value as NULL, so an empty payload could not be stored
        # there; it is refused on every database alike rather than working on some
        raise PayloadError(
            f"{type(serializer).__name__} encoded the payload as zero bytes; an empty payload "
            "cannot be stored on every supported database (Oracle keeps it as NULL): send at "
            "least one byte")
    return data
