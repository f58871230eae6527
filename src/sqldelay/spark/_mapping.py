"""Column mapping: which DataFrame columns become a message's key, payload and due time.

Everything here runs without a database and checks the Spark schema up front, so a wrong
column or type fails on the driver before any task starts. Rows arrive in tasks as Arrow
record batches (``to_pylist``), where a Spark ``TIMESTAMP`` is a timezone-aware datetime, a
struct a dict and a map a list of ``(key, value)`` tuples.

Payload column type -> serializer (the serializer's type name is part of the queue's
partition, so consumers must open the queue with the same one):

=====================================  ==================  ================================
Spark type of the payload column       serializer          what the consumer receives
=====================================  ==================  ================================
struct / map / array                   ``JsonSerializer``  the JSON value (dict / list)
string                                 ``StrSerializer``   the string as is
binary                                 ``BytesSerializer`` the bytes as is
=====================================  ==================  ================================
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pyspark.sql import types as T

from ..errors import InvalidArgumentError
from ..messages import Message
from ..serializers import SERIALIZERS, Serializer

_INTEGER_TYPES = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
_KEY_TYPES = (T.StringType, *_INTEGER_TYPES)
_JSON_TYPES = (T.StructType, T.MapType, T.ArrayType)

@dataclass(frozen=True)
class ColumnMapping:
    """Resolved, checked column names plus the payload's serializer; picklable for tasks."""

    key: str
    payload: str
    at: str | None
    serializer_name: str  # "json", "str" or "bytes"
    payload_type_json: str  # the payload column's Spark type, for the JSON converter
    priority: str | None = None
    group: str | None = None

    def columns(self) -> list[str]:
        """The mapped columns, each once, in a fixed order."""
        return [c for c in dict.fromkeys(
            (self.key, self.payload, self.at, self.priority, self.group)) if c is not None]

    def serializer(self) -> Serializer:
        return SERIALIZERS[self.serializer_name]()

    def payload_type(self) -> T.DataType:
        return T._parse_datatype_json_string(self.payload_type_json)


def resolve_mapping(schema: T.StructType, *, key: str, payload: str, at: str | None,
                    priority: str | None = None, group: str | None = None) -> ColumnMapping:
    """Check that the columns exist and have usable types; raise InvalidArgumentError if not."""
    fields = {f.name: f for f in schema.fields}
    available = ", ".join(fields) or "(none)"

    def field(name: str, role: str) -> T.StructField:
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"the {role} column name must be a non-empty string")
        if name not in fields:
            raise InvalidArgumentError(
                f"the {role} column {name!r} is not in the DataFrame; its columns are: {available}"
            )
        return fields[name]

    key_field = field(key, "key")
    if not isinstance(key_field.dataType, _KEY_TYPES):
        raise InvalidArgumentError(
            f"the key column {key!r} has type {key_field.dataType.simpleString()}; "
            "use a string or integer column (cast it with F.col(...).cast('string'))"
        )

    payload_field = field(payload, "payload")
    ptype = payload_field.dataType
    if isinstance(ptype, _JSON_TYPES):
        serializer_name = "json"
    elif isinstance(ptype, T.StringType):
        serializer_name = "str"
    elif isinstance(ptype, T.BinaryType):
        serializer_name = "bytes"
    else:
        raise InvalidArgumentError(
            f"the payload column {payload!r} has type {ptype.simpleString()}; use a struct, "
            "map or array column (sent as JSON), a string column or a binary column"
        )

    if at is not None:
        at_field = field(at, "at")
        if isinstance(at_field.dataType, T.TimestampNTZType):
            raise InvalidArgumentError(
                f"the at column {at!r} is a naive timestamp (timestamp_ntz): it names no "
                "instant. Convert it to a timestamp, e.g. "
                f"F.to_utc_timestamp(F.col({at!r}), 'Europe/Paris').cast('timestamp') "
                f"or F.col({at!r}).cast('timestamp') to read it in the session time zone"
            )
        if not isinstance(at_field.dataType, T.TimestampType):
            raise InvalidArgumentError(
                f"the at column {at!r} has type {at_field.dataType.simpleString()}; use a "
                "timestamp column (e.g. F.to_timestamp(...)); a null at means due now"
            )

    if priority is not None and not isinstance(field(priority, "priority").dataType,
                                               _INTEGER_TYPES):
        raise InvalidArgumentError(
            f"the priority column {priority!r} has type "
            f"{fields[priority].dataType.simpleString()}; use an integer column (a null "
            "priority is 0)")
    if group is not None and not isinstance(field(group, "group").dataType, T.StringType):
        raise InvalidArgumentError(
            f"the group column {group!r} has type {fields[group].dataType.simpleString()}; "
            "use a string column (a null group means no group)")
    return ColumnMapping(key=key, payload=payload, at=at, serializer_name=serializer_name,
                         payload_type_json=ptype.json(), priority=priority, group=group)


# ---- row conversion (in tasks) ------------------------------------------------------------


def json_converter(dtype: T.DataType) -> Callable[[Any], Any]:
    """A function turning an Arrow ``to_pylist`` value of ``dtype`` into a JSON-ready value.

    Maps arrive as lists of (key, value) pairs and become objects with string keys; times
    become ISO 8601 strings, decimals strings (no float rounding), binary base64 text.
    """
    if isinstance(dtype, T.StructType):
        subs = [(f.name, json_converter(f.dataType)) for f in dtype.fields]

        def struct(value: Any) -> Any:
            if value is None:
                return None
            return {name: conv(value.get(name)) for name, conv in subs}

        return struct
    if isinstance(dtype, T.MapType):
        conv_k = json_converter(dtype.keyType)
        conv_v = json_converter(dtype.valueType)

        def mapping(value: Any) -> Any:
            if value is None:
                return None
            items = value.items() if isinstance(value, dict) else value
            return {_json_key(conv_k(k)): conv_v(v) for k, v in items}

        return mapping
    if isinstance(dtype, T.ArrayType):
        conv_e = json_converter(dtype.elementType)

        def array(value: Any) -> Any:
            if value is None:
                return None
            return [conv_e(v) for v in value]

        return array
    return _json_scalar


def _json_key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)


def _json_scalar(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return value


@dataclass
class RowConverter:
    """Turns record dicts (one per DataFrame row) into ``Message`` objects, checking each."""

    mapping: ColumnMapping
    update: bool

    def __post_init__(self) -> None:
        m = self.mapping
        self._payload = (json_converter(m.payload_type()) if m.serializer_name == "json"
                         else None)

    def message(self, record: dict[str, Any]) -> Message:
        m = self.mapping
        key = record.get(m.key)
        if key is None:
            raise InvalidArgumentError(
                f"the key column {m.key!r} is null in a row; every message needs a key "
                f"(filter with F.col({m.key!r}).isNotNull())"
            )
        if not isinstance(key, str):
            key = str(key)
        payload = record.get(m.payload)
        if self._payload is not None:
            payload = self._payload(payload)
        elif payload is None:
            raise InvalidArgumentError(
                f"the payload column {m.payload!r} is null for key {key!r}; a "
                f"{m.serializer_name} payload cannot be null"
            )
        at = record.get(m.at) if m.at is not None else None
        if at is not None:
            if not isinstance(at, dt.datetime):
                raise InvalidArgumentError(
                    f"the at column {m.at!r} holds {type(at).__name__} for key {key!r}"
                )
            if at.tzinfo is None or at.tzinfo.utcoffset(at) is None:
                raise InvalidArgumentError(
                    f"the at column {m.at!r} holds a naive timestamp ({at.isoformat()}) for key "
                    f"{key!r}; a due time must name an instant (timezone-aware)"
                )
        priority = record.get(m.priority) if m.priority is not None else None
        group = record.get(m.group) if m.group is not None else None
        return Message(key, payload, at=at, update=self.update,
                       priority=0 if priority is None else priority, group=group)

    def messages(self, records: Iterable[dict[str, Any]]) -> list[Message]:
        return [self.message(r) for r in records]


def arrow_records(batches: Iterable[Any], columns: list[str]) -> Iterator[list[dict[str, Any]]]:
    """One list of record dicts per Arrow batch, reading only the mapped columns."""
    for batch in batches:
        if batch.num_rows == 0:
            continue
        yield batch.select(columns).to_pylist()


def naive_local_to_utc(value: Any) -> Any:
    """PySpark hands TIMESTAMP values to Python row iterators as naive datetimes in the
    worker's local time zone; attach that zone back so the instant is preserved."""
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.astimezone(dt.UTC)
    return value
