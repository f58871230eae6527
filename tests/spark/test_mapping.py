"""Column mapping and row conversion: no Spark job, no database."""

from __future__ import annotations

import datetime as dt
import time
from decimal import Decimal

import pytest
from pyspark.sql import types as T

from sqldelay import InvalidArgumentError
from sqldelay.spark._mapping import RowConverter, json_converter, resolve_mapping
from sqldelay.spark.source import _like_escape, write_config

UTC = dt.UTC
BODY = T.StructType([T.StructField("n", T.LongType()), T.StructField("msg", T.StringType())])


def schema(**fields: T.DataType) -> T.StructType:
    return T.StructType([T.StructField(name, dtype) for name, dtype in fields.items()])


def test_missing_column_names_the_column_and_lists_the_available_ones():
    s = schema(user_id=T.LongType(), body=BODY)
    with pytest.raises(InvalidArgumentError, match=r"payload column 'payload' .*user_id, body"):
        resolve_mapping(s, key="user_id", payload="payload", at=None)
    with pytest.raises(InvalidArgumentError, match="at column 'send_at' is not in"):
        resolve_mapping(s, key="user_id", payload="body", at="send_at")


@pytest.mark.parametrize(("dtype", "serializer"), [
    (BODY, "json"), (T.MapType(T.StringType(), T.LongType()), "json"),
    (T.ArrayType(T.LongType()), "json"), (T.StringType(), "str"), (T.BinaryType(), "bytes"),
])
def test_payload_type_picks_the_serializer(dtype, serializer):
    m = resolve_mapping(schema(k=T.StringType(), p=dtype), key="k", payload="p", at=None)
    assert m.serializer_name == serializer
    assert m.serializer().type_name == serializer
    assert m.payload_type() == dtype


def test_unusable_types_are_refused_with_a_hint():
    with pytest.raises(InvalidArgumentError, match="key column 'k' has type double"):
        resolve_mapping(schema(k=T.DoubleType(), p=T.StringType()), key="k", payload="p", at=None)
    with pytest.raises(InvalidArgumentError, match="payload column 'p' has type int"):
        resolve_mapping(schema(k=T.StringType(), p=T.IntegerType()), key="k", payload="p",
                        at=None)
    with pytest.raises(InvalidArgumentError, match="at column 't' has type string"):
        resolve_mapping(schema(k=T.StringType(), p=T.StringType(), t=T.StringType()),
                        key="k", payload="p", at="t")


def test_a_naive_timestamp_column_is_refused():
    s = schema(k=T.StringType(), p=T.StringType(), t=T.TimestampNTZType())
    with pytest.raises(InvalidArgumentError, match="naive timestamp"):
        resolve_mapping(s, key="k", payload="p", at="t")


def test_json_conversion_of_arrow_values():
    dtype = T.StructType([
        T.StructField("tags", T.MapType(T.IntegerType(), T.StringType())),
        T.StructField("when", T.TimestampType()),
        T.StructField("day", T.DateType()),
        T.StructField("price", T.DecimalType(10, 2)),
        T.StructField("raw", T.BinaryType()),
        T.StructField("items", T.ArrayType(T.MapType(T.StringType(), T.LongType()))),
        T.StructField("gone", BODY),
    ])
    value = {
        "tags": [(1, "a"), (2, "b")],  # Arrow hands maps over as (key, value) pairs
        "when": dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC),
        "day": dt.date(2030, 1, 2), "price": Decimal("12.30"), "raw": b"\x00\xff",
        "items": [[("x", 1)], []], "gone": None,
    }
    assert json_converter(dtype)(value) == {
        "tags": {"1": "a", "2": "b"}, "when": "2030-01-02T03:04:05+00:00", "day": "2030-01-02",
        "price": "12.30", "raw": "AP8=", "items": [{"x": 1}, {}], "gone": None,
    }


def test_row_converter_builds_messages_and_checks_each_row():
    m = resolve_mapping(schema(k=T.LongType(), p=BODY, t=T.TimestampType()),
                        key="k", payload="p", at="t")
    conv = RowConverter(m, update=True)
    when = dt.datetime(2030, 1, 1, tzinfo=UTC)
    msg = conv.message({"k": 7, "p": {"n": 1, "msg": "hi"}, "t": when})
    assert (msg.key, msg.payload, msg.at, msg.update) == ("7", {"n": 1, "msg": "hi"}, when, True)
    assert conv.message({"k": 8, "p": None, "t": None}).at is None  # null at: due now
    with pytest.raises(InvalidArgumentError, match="key column 'k' is null"):
        conv.message({"k": None, "p": {"n": 1, "msg": "x"}, "t": when})
    with pytest.raises(InvalidArgumentError, match="naive timestamp"):
        conv.message({"k": 9, "p": {"n": 1, "msg": "x"}, "t": dt.datetime(2030, 1, 1)})


def test_null_string_payload_is_refused():
    m = resolve_mapping(schema(k=T.StringType(), p=T.StringType()), key="k", payload="p",
                        at=None)
    with pytest.raises(InvalidArgumentError, match="payload column 'p' is null for key 'a'"):
        RowConverter(m, update=False).message({"k": "a", "p": None})


def test_write_options_defaults_and_errors():
    s = schema(key=T.StringType(), payload=T.StringType(), at=T.TimestampType())
    config = write_config({"url": "sqlite://", "queue": "q"}, s)
    assert (config.mapping.key, config.mapping.payload, config.mapping.at) == (
        "key", "payload", "at")
    assert (config.update, config.table_name) == (False, "delayed_queue")
    assert write_config({"url": "sqlite://", "queue": "q", "at": ""}, s).mapping.at is None
    with pytest.raises(InvalidArgumentError, match="needs .option\\('url'"):
        write_config({"queue": "q"}, s)
    with pytest.raises(InvalidArgumentError, match="'update' must be true or false"):
        write_config({"url": "sqlite://", "queue": "q", "update": "maybe"}, s)
    with pytest.raises(InvalidArgumentError, match="'chunk_size' must be a positive integer"):
        write_config({"url": "sqlite://", "queue": "q", "chunk_size": "0"}, s)


def test_like_escape_keeps_wildcards_literal():
    assert _like_escape("a_b%c\\") == "a\\_b\\%c\\\\"


def test_password_option_goes_into_the_url():
    s = schema(key=T.StringType(), payload=T.StringType())
    config = write_config({"url": "postgresql+psycopg://app@db:5432/x", "queue": "q",
                           "password": "s3cr:t@"}, s)
    assert config.url == "postgresql+psycopg://app:s3cr%3At%40@db:5432/x"


@pytest.fixture
def new_york_local_time(monkeypatch):
    """The process's local time zone set to one that is not UTC, restored afterwards."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_row_writer_of_pyspark_4_0_restores_the_instant_of_local_naive_timestamps(
        new_york_local_time):
    from pyspark.sql import Row

    from sqldelay.spark.source import _row_records

    s = schema(key=T.StringType(), payload=T.StringType(), at=T.TimestampType())
    config = write_config({"url": "sqlite://", "queue": "q", "chunk_size": "2"}, s)
    instant = dt.datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    local_naive = instant.astimezone().replace(tzinfo=None)  # what PySpark hands to rows
    assert local_naive.hour == 3  # 07:08 UTC is 03:08 in New York (daylight saving time)
    rows = [Row(key=f"k{i}", payload="p", at=local_naive) for i in range(3)]
    batches = list(_row_records(config, iter(rows)))
    assert [len(b) for b in batches] == [2, 1]
    assert batches[0][0]["at"] == instant
    assert RowConverter(config.mapping, update=False).message(batches[1][0]).at == instant
