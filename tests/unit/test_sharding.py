"""Routing of a sharded queue: a key's shard follows from the documented hash alone, is the
same in every process, and adding a shard moves only the keys the new shard wins."""

from __future__ import annotations

import collections
import hashlib
import os
import subprocess
import sys
from datetime import timedelta

import pytest
import sqlalchemy as sa

from sqldelay import (
    DelayedQueue,
    InvalidArgumentError,
    JsonSerializer,
    ShardedQueue,
    StrSerializer,
    shard_name,
    shard_score,
)
from sqldelay.sharded_base import Router
from sqldelay.worker_base import MAX_BACKOFF, Rotation

NAMES = ["pg-a", "pg-b", "maria"]
KEYS = [f"user:{i}" for i in range(20_000)]


def expected_shard(names: list[str], key: str) -> str:
    """The shard of ``key`` as the docs define it, computed here from hashlib directly."""

    def score(name: str) -> int:
        raw = name.encode()
        digest = hashlib.blake2b(len(raw).to_bytes(4, "big") + raw + key.encode(),
                                 digest_size=8).digest()
        return int.from_bytes(digest, "big")

    return max(names, key=lambda n: (score(n), n))


def test_the_shard_of_a_key_follows_from_the_documented_hash():
    router = Router(NAMES)
    for key in KEYS[:2000] + ["", "ünïcode:ключ", "a" * 500]:
        assert router.route(key) == expected_shard(NAMES, key)
        assert shard_score("pg-a", key) == int.from_bytes(
            hashlib.blake2b(b"\0\0\0\x04pg-a" + key.encode(), digest_size=8).digest(), "big")


def test_the_shard_of_a_key_is_the_same_in_another_process_and_hash_seed():
    code = ("import sys; from sqldelay.sharded_base import Router; r = Router(sys.argv[1:]); "
            "print(','.join(r.route(f'user:{i}') for i in range(3000)))")
    routes = set()
    for seed in ("0", "12345"):
        out = subprocess.run([sys.executable, "-c", code, *NAMES], capture_output=True,
                             text=True, check=True,
                             env={**os.environ, "PYTHONHASHSEED": seed}).stdout.strip()
        routes.add(out)
    router = Router(list(reversed(NAMES)))  # the order the shards are given in is no matter
    assert routes == {",".join(router.route(f"user:{i}") for i in range(3000))}


def test_keys_spread_evenly():
    counts = collections.Counter(map(Router(NAMES).route, KEYS))
    for name in NAMES:
        assert abs(counts[name] - len(KEYS) / 3) < 0.05 * len(KEYS)


def test_adding_a_shard_moves_only_the_keys_it_wins_and_about_a_share():
    before, after = Router(NAMES), Router([*NAMES, "pg-c"])
    moved = [k for k in KEYS if before.route(k) != after.route(k)]
    assert all(after.route(k) == "pg-c" for k in moved)
    assert abs(len(moved) - len(KEYS) / 4) < 0.05 * len(KEYS)
    # and removing it again moves those keys back, nothing else
    assert all(before.route(k) == Router(NAMES).route(k) for k in moved)


@pytest.fixture
def engines(tmp_path):
    made = [sa.create_engine(f"sqlite:///{tmp_path}/s{i}.db") for i in range(3)]
    yield made
    for e in made:
        e.dispose()


def test_default_shard_names_leave_out_driver_user_and_password():
    engine = sa.create_engine("postgresql+psycopg://bob:secret@db1:5433/app")
    name = shard_name(DelayedQueue(engine, "emails", table_name="jobs"))
    assert name == "postgresql://db1:5433/app/jobs/emails"
    assert "secret" not in name and "bob" not in name


def test_a_sharded_queue_routes_by_shard_name(engines):
    queues = {f"s{i}": DelayedQueue(e, "emails") for i, e in enumerate(engines)}
    sharded = ShardedQueue(queues)
    for key in KEYS[:200]:
        assert sharded.route(key) == expected_shard(list(queues), key)


def test_bad_shard_lists_are_refused_before_anything_runs(engines):
    same = [DelayedQueue(engines[0], "emails"), DelayedQueue(engines[0], "emails")]
    with pytest.raises(InvalidArgumentError, match="two shards named"):
        ShardedQueue(same)
    with pytest.raises(InvalidArgumentError, match="at least one shard"):
        ShardedQueue([])
    with pytest.raises(InvalidArgumentError, match="must be a DelayedQueue"):
        ShardedQueue([engines[0]])
    with pytest.raises(InvalidArgumentError, match="same queue"):
        ShardedQueue([DelayedQueue(engines[0], "emails", serializer=JsonSerializer()),
                      DelayedQueue(engines[1], "emails", serializer=StrSerializer())])
    with pytest.raises(InvalidArgumentError, match="same queue"):
        ShardedQueue([DelayedQueue(engines[0], "emails"), DelayedQueue(engines[1], "sms")])
    with pytest.raises(InvalidArgumentError, match="non-empty str"):
        ShardedQueue({"": DelayedQueue(engines[0], "emails")})
    sharded = ShardedQueue([DelayedQueue(e, "emails") for e in engines])
    with pytest.raises(InvalidArgumentError, match="key"):
        sharded.offer(42, "x")
    with pytest.raises(InvalidArgumentError, match="limit"):
        sharded.poll_many(0)


def test_previous_shards_are_consumed_until_resharded(engines):
    old = {"a": DelayedQueue(engines[0], "emails"), "b": DelayedQueue(engines[1], "emails")}
    new = {"a": old["a"], "c": DelayedQueue(engines[2], "emails")}  # b removed, c added
    sharded = ShardedQueue(new, previous=old)
    assert list(sharded.consumed_shards()) == ["a", "c", "b"]
    for key in KEYS[:300]:
        then, now = expected_shard(["a", "b"], key), expected_shard(["a", "c"], key)
        assert sharded.old_route(key) == (None if then == now else then)


def test_a_shard_that_is_down_sits_out_a_growing_backoff_then_takes_turns_again():
    rotation = Rotation(["a", "b"], {}, 10)
    waits = [rotation.failed("a", 100.0) for _ in range(12)]
    assert waits[0] <= Rotation.FIRST_BACKOFF and max(waits) <= MAX_BACKOFF
    assert waits[-1] >= MAX_BACKOFF / 2  # jittered, but it did grow
    assert [n for n, _ in rotation.turns(100.0)] == ["b"]
    assert rotation.next_up(100.0) == pytest.approx(waits[-1])
    rotation.wake()  # a wake-up does not bring back a dead shard before its time
    assert [n for n, _ in rotation.turns(100.0)] == ["b"]
    assert [n for n, _ in rotation.turns(100.0 + MAX_BACKOFF)] == ["a", "b"]
    rotation.reachable("a")
    assert rotation.failed("a", 0.0) <= Rotation.FIRST_BACKOFF


def test_a_shard_with_nothing_due_is_skipped_until_its_due_time(engines):
    sharded = ShardedQueue([DelayedQueue(e, "emails") for e in engines],
                           recheck=timedelta(seconds=30))
    first = sharded.turns()
    sharded.nothing_due_for(first[0], 20.0)
    assert first[0] not in sharded.turns()
    sharded.offered(first[0])  # an offer through this object brings it back
    assert first[0] in sharded.turns()
