"""Pure checks of the value layer: time conversion, serializers, the dialect registry."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from sqldelay import (
    BytesSerializer,
    DelayedQueue,
    FakeClock,
    InvalidArgumentError,
    JsonSerializer,
    PayloadError,
    StrSerializer,
    UnsupportedDialectError,
    create_schema,
)
from sqldelay.clock import from_ms, to_ms


@pytest.mark.parametrize("when", [
    datetime(1970, 1, 1, tzinfo=UTC),
    datetime(2030, 6, 1, 12, 30, 15, 123000, tzinfo=UTC),
    datetime(2030, 6, 1, 14, 30, tzinfo=timezone(timedelta(hours=2))),
    datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
])
def test_epoch_milliseconds_round_trip(when):
    assert from_ms(to_ms(when)) == when
    assert to_ms(when) == round(when.timestamp() * 1000)


def test_naive_datetimes_are_rejected():
    with pytest.raises(InvalidArgumentError, match="naive"):
        to_ms(datetime(2030, 1, 1))
    with pytest.raises(InvalidArgumentError, match="naive"):
        FakeClock(datetime(2030, 1, 1))


def test_fake_clock_moves_only_when_told():
    clock = FakeClock(datetime(2030, 1, 1, tzinfo=UTC))
    assert clock.now() == clock.now() == datetime(2030, 1, 1, tzinfo=UTC)
    clock.advance(timedelta(minutes=5))
    assert clock.now() == datetime(2030, 1, 1, 0, 5, tzinfo=UTC)


def test_json_is_canonical_so_equal_objects_compare_equal():
    s = JsonSerializer()
    assert s.encode({"b": 1, "a": [1, "ü"]}) == s.encode({"a": [1, "ü"], "b": 1})
    assert s.decode(s.encode({"a": [1, "ü"]})) == {"a": [1, "ü"]}


@pytest.mark.parametrize("payload", [
    {"b": 1, "a": [1, 2.5, None, True, "é\u2028\"q\\"]}, [{"z": {}, "y": []}, -0.0],
    {"big": 10**30, "n": {2: "two", 1: "one"}}, "text", 7, None,
])
def test_json_bytes_are_those_json_dumps_gives(payload):
    # messages stored by earlier versions compare equal to the same payload offered again
    assert JsonSerializer().encode(payload) == json.dumps(
        payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def test_json_written_otherwise_is_still_read():
    # JSON in UTF-16, or with a byte order mark, as json.loads reads it
    s = JsonSerializer()
    assert s.decode('{"a": ["ü"]}'.encode("utf-16")) == {"a": ["ü"]}
    assert s.decode(b'\xef\xbb\xbf {"a": 1} ') == {"a": 1}


def test_json_is_the_same_where_the_c_encoder_cannot_be_built(monkeypatch):
    from sqldelay import serializers

    def other_arguments(*args):
        raise TypeError("takes other arguments")

    with monkeypatch.context() as patched:
        patched.setattr(serializers.json.encoder, "c_make_encoder", other_arguments)
        built = serializers._c_encoder_for(JsonSerializer._encoder)
    assert built is None
    monkeypatch.setattr(JsonSerializer, "_c_encoder", built)  # JSONEncoder.encode does it all
    assert JsonSerializer().encode({"b": [1], "a": "ü"}) == '{"a":"ü","b":[1]}'.encode()


def test_a_payload_that_contains_itself_is_refused():
    loop: dict = {}
    loop["again"] = loop
    with pytest.raises(PayloadError, match="contains itself"):
        JsonSerializer().encode(loop)


@pytest.mark.parametrize("serializer, bad", [
    (JsonSerializer(), {1, 2}), (JsonSerializer(), float("nan")),
    (BytesSerializer(), "text"), (StrSerializer(), b"bytes"), (StrSerializer(), "\ud800"),
])
def test_unencodable_payloads(serializer, bad):
    with pytest.raises(PayloadError):
        serializer.encode(bad)


def test_a_broken_custom_serializer_is_reported():
    class Broken:
        type_name = "broken"

        def encode(self, payload):
            return "not bytes"

        def decode(self, data):
            return data

    queue = DelayedQueue(sa.create_engine("sqlite://"), "q", serializer=Broken())
    with pytest.raises(PayloadError, match="not bytes"):
        queue.offer("k", 1)  # rejected before the (absent) table is touched


def test_unknown_dialect_lists_the_supported_ones():
    engine = sa.create_engine("sqlite://")
    engine.dialect.name = "firebird"
    with pytest.raises(UnsupportedDialectError, match="postgresql.*sqlite"):
        DelayedQueue(engine, "q")


@pytest.mark.parametrize("name", ["", "q" * 61, None])
def test_bad_queue_names(name):
    with pytest.raises(InvalidArgumentError, match="queue name"):
        DelayedQueue(sa.create_engine("sqlite://"), name)


def test_bad_table_names():
    with pytest.raises(InvalidArgumentError, match="table_name"):
        DelayedQueue(sa.create_engine("sqlite://"), "q", table_name="drop table x;--")


def test_a_table_name_is_measured_in_bytes():
    # 20 two-byte letters are 40 bytes, the most; 21 are one letter too many
    engine = sa.create_engine("sqlite://")
    DelayedQueue(engine, "q", table_name="ä" * 20)
    with pytest.raises(InvalidArgumentError, match="at most 40 bytes"):
        DelayedQueue(engine, "q", table_name="ä" * 21)
    with pytest.raises(InvalidArgumentError, match="at most 40 bytes"):
        create_schema(engine, table_name="ä" * 21)
