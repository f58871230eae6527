"""A queue sharded over three databases: the suite's PostgreSQL database, a second database on
the same server (its name followed by ``_shard2``: ``test_shard2`` by default; created here
when missing) and MariaDB.

The shards are the real servers of the suite, so these tests need PostgreSQL and MariaDB both
(skipped, saying why, without them; failed when CI=true), and as elsewhere run only where
SQLDELAY_TEST_BACKENDS and SQLDELAY_TEST_FRONTS select their databases and front end.
SQLDELAY_TEST_SHARD_KEYS scales the load test (default 50,000 offers, as the issue asks).
"""

from __future__ import annotations

import asyncio
import collections
import os
import random
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from sqldelay import (
    AsyncDelayedQueue,
    AsyncShardedQueue,
    AsyncWorker,
    DelayedQueue,
    Message,
    OfferOutcome,
    ProcessingMode,
    ShardedQueue,
    ShardUnavailableError,
    Worker,
    cli,
    create_schema,
    create_schema_async,
    drop_schema,
    shard_name,
)
from sqldelay.cron_base import tick_key
from sqldelay.sharded_base import copy_op
from tools.servers import free_port

from ..conftest import DATABASES, FRONTS, IN_CI, MYSQL_URL, PG_URL, _reachable, unique_name
from ..helpers import wait_for
from .test_worker_restart import PrivatePostgres

SECOND_PG = f"{sa.make_url(PG_URL).database}_shard2"  # from the settings (SQLDELAY_TEST_PG_URL)
LOAD_KEYS = int(os.environ.get("SQLDELAY_TEST_SHARD_KEYS", "50000"))
FAST = {"idle_poll": timedelta(milliseconds=100), "listeners": []}


def _left_out(*databases: str) -> list[str]:
    """Those of ``databases`` SQLDELAY_TEST_BACKENDS leaves out ("mysql": the MariaDB
    server, which it may name either way)."""
    return [d for d in databases
            if not ({"mysql", "mariadb"} if d == "mysql" else {d}) & set(DATABASES)]


def _needs(*databases: str):
    left_out = _left_out(*databases)
    return pytest.mark.skipif(bool(left_out), reason="SQLDELAY_TEST_BACKENDS leaves out "
                                                     + ", ".join(left_out))


# the front end each test runs, as SQLDELAY_TEST_FRONTS selects it
BLOCKING = pytest.mark.skipif("sync" not in FRONTS,
                              reason="SQLDELAY_TEST_FRONTS leaves out the blocking front end")
ASYNCIO = pytest.mark.skipif("async" not in FRONTS,
                             reason="SQLDELAY_TEST_FRONTS leaves out the asyncio front end")


def _second_pg_url() -> str:
    """The second PostgreSQL database on the suite's server, created when missing."""
    url = sa.make_url(PG_URL)
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        if not conn.scalar(sa.text("SELECT 1 FROM pg_database WHERE datname = :n"),
                           {"n": SECOND_PG}):
            try:
                conn.exec_driver_sql(f'CREATE DATABASE "{SECOND_PG}"')
            except sa.exc.ProgrammingError:  # another session made it meanwhile
                pass
    admin.dispose()
    return url.set(database=SECOND_PG).render_as_string(hide_password=False)


@pytest.fixture(scope="module")
def shard_urls():
    left_out = _left_out("postgresql", "mysql")
    if left_out:
        pytest.skip(f"SQLDELAY_TEST_BACKENDS leaves out {', '.join(left_out)}")
    urls = {"postgresql": PG_URL, "mysql": MYSQL_URL}
    for name, url in urls.items():
        problem = _reachable(url)
        if problem:
            message = f"sharding needs the {name} server at {url} ({problem})"
            if IN_CI:
                pytest.fail(message, pytrace=False)
            pytest.skip(message)
    return [PG_URL, _second_pg_url(), MYSQL_URL]


@pytest.fixture(scope="module")
def shard_engines(shard_urls):
    engines = [sa.create_engine(u, pool_size=20, max_overflow=20) for u in shard_urls]
    table = unique_name("sqdt_shards")
    for engine in engines:
        create_schema(engine, table_name=table)
    yield engines, table
    for engine in engines:
        drop_schema(engine, table_name=table)
        engine.dispose()


@pytest.fixture
def sharded(shard_engines):
    engines, table = shard_engines
    name = unique_name("sq")
    return ShardedQueue([DelayedQueue(e, name, table_name=table) for e in engines])


@BLOCKING
def test_each_key_lives_on_its_own_shard_and_the_api_spans_all(sharded):
    keys = [f"k{i}" for i in range(300)]
    outcomes = sharded.offer_many([Message(k, {"n": i}) for i, k in enumerate(keys)])
    assert outcomes == [OfferOutcome.CREATED] * 300
    per_shard = sharded.shard_stats()
    for name, queue in sharded.shards.items():
        mine = [k for k in keys if sharded.route(k) == name]
        assert per_shard[name].due == len(mine) > 50  # every database holds its share
        assert all(queue.contains(k) for k in mine[:20])
    assert sharded.stats().due == 300
    assert sharded.offer("k7", {"n": -7}) is OfferOutcome.UPDATED
    assert sharded.offer("k7", {"n": 0}, update=False) is OfferOutcome.IGNORED
    assert sharded.get("k7").payload == {"n": -7} and sharded.contains("k7")

    got = sharded.poll_many(250)
    assert {sharded.shard_of(e) for e in got} == set(sharded.shards)  # taken from each
    assert sharded.ack_many(got) == len(got)
    rest = []
    while (envelope := sharded.poll()) is not None:
        rest.append(envelope)
        assert sharded.ack(envelope)
    assert len(got) + len(rest) == 300
    assert sharded.stats().due == 0 and sharded.drop("k7") is False
    assert sharded.next_due() is None


@BLOCKING
def test_a_worker_drains_every_shard_and_acks_on_the_shard_it_claimed_from(sharded):
    keys = [f"w{i}" for i in range(600)]
    sharded.offer_many([Message(k, i) for i, k in enumerate(keys)])
    seen = collections.Counter()
    lock = threading.Lock()

    def handler(envelope):
        with lock:
            seen[envelope.key] += 1

    assert Worker(sharded, handler, concurrency=4, batch_size=50, **FAST).drain() == 600
    assert seen == collections.Counter(keys)
    assert all(s.due + s.in_flight == 0 for s in sharded.shard_stats().values())


@BLOCKING
def test_flow_control_fans_out_to_every_shard(sharded):
    sharded.pause()
    assert all(c.paused for c in sharded.flow_control().values())
    sharded.offer("p", 1)
    assert sharded.poll() is None
    sharded.resume()
    assert sharded.poll().key == "p"


@BLOCKING
def test_cron_ticks_live_on_their_keys_shards_and_a_new_configuration_replaces_them(sharded):
    cron = sharded.cron()
    handle = cron.install_periodic("beat", timedelta(minutes=1), payload={"v": 1}, ahead=60)
    handle.close()  # the first install is done; no background installer in the test
    [schedule] = cron.list("beat")
    assert (schedule.pending, schedule.in_flight) == (60, 0)
    per_shard = sharded.shard_stats()
    assert sum(s.scheduled for s in per_shard.values()) == 60
    assert sum(1 for s in per_shard.values() if s.scheduled) >= 2  # spread like offers
    assert sharded.next_due() == schedule.next_at
    assert sharded.contains(tick_key("beat", schedule.config_hash, schedule.next_at))

    # a changed payload is a new configuration: the old one's ticks go on every shard
    cron.install_periodic("beat", timedelta(minutes=1), payload={"v": 2}, ahead=60).close()
    [changed] = cron.list("beat")
    assert changed.config_hash != schedule.config_hash and changed.pending == 60
    assert sum(s.scheduled for s in sharded.shard_stats().values()) == 60
    assert cron.uninstall("beat") == 60
    assert cron.list("beat") == [] and sharded.stats().scheduled == 0


@BLOCKING
def test_offers_of_colliding_keys_from_four_producers_are_acked_once_per_creation(sharded):
    """LOAD_KEYS offers over a key space a third that size, from 4 producers in batches,
    while 4 workers consume: each key is handled exactly as many times as it was CREATED."""
    space = max(LOAD_KEYS // 3, 1)
    created = collections.Counter()
    handled = collections.Counter()
    lock = threading.Lock()
    producers_done = threading.Event()
    errors = []

    def produce(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(LOAD_KEYS // 4 // 100):
                batch = [Message(f"c{rng.randrange(space)}", seed, update=False)
                         for _ in range(100)]
                outcomes = sharded.offer_many(batch)
                with lock:
                    created.update(m.key for m, o in zip(batch, outcomes, strict=True)
                                   if o is OfferOutcome.CREATED)
        except BaseException as exc:
            errors.append(exc)
            raise

    def handler(envelope):
        with lock:
            handled[envelope.key] += 1

    workers = [Worker(sharded, handler, concurrency=2, batch_size=100, **FAST)
               for _ in range(4)]
    consumers = [threading.Thread(target=w.run, kwargs={"signals": False}) for w in workers]
    producers = [threading.Thread(target=produce, args=(s,)) for s in range(4)]
    for t in consumers + producers:
        t.start()
    try:
        for t in producers:
            t.join(120)
        producers_done.set()
        assert not errors
        deadline = time.monotonic() + 120
        while True:
            with lock:
                if handled == created:
                    break
            assert time.monotonic() < deadline, "not every created key was handled"
            time.sleep(0.05)
    finally:
        for w in workers:
            w.stop()
        for t in consumers:
            t.join(60)
    assert sum(created.values()) > space  # keys did collide and come back after their ack
    assert sharded.stats().due + sharded.stats().in_flight == 0
    assert handled == created


@ASYNCIO
def test_the_async_front_routes_and_consumes_the_same_way(shard_urls, shard_engines, sharded):
    _, table = shard_engines
    drivers = {"postgresql": "postgresql+asyncpg", "mysql": "mysql+asyncmy"}

    async def scenario() -> tuple[list[str], list[str], int]:
        engines = [create_async_engine(sa.make_url(u).set(
            drivername=drivers[sa.make_url(u).get_backend_name()]))
            for u in shard_urls]
        try:
            queue = AsyncShardedQueue([AsyncDelayedQueue(e, sharded.name, table_name=table)
                                       for e in engines])
            keys = [f"a{i}" for i in range(200)]
            await queue.offer_many([Message(k, i) for i, k in enumerate(keys)])
            routes = [queue.route(k) for k in keys]
            seen = []

            async def handler(envelope):
                seen.append(envelope.key)

            handled = await AsyncWorker(queue, handler, concurrency=4, **FAST).drain()
            return routes, seen, handled
        finally:
            for e in engines:
                await e.dispose()

    routes, seen, handled = asyncio.run(scenario())
    # the same shard names (driver left out) and so the same routes as the blocking front
    assert routes == [sharded.route(f"a{i}") for i in range(200)]
    assert handled == 200 and sorted(seen) == sorted(f"a{i}" for i in range(200))


@BLOCKING
def test_a_shard_down_mid_run_stops_only_its_own_keys_and_loses_nothing(shard_engines):
    """A private PostgreSQL shard is stopped while producers and a worker run: offers of the
    other shards' keys never fail, the worker goes on draining them, and once the shard is
    back every message offered is handled."""
    engines, table = shard_engines
    server = PrivatePostgres()
    private = sa.create_engine(server.url, pool_size=10, pool_pre_ping=True)
    create_schema(private, table_name=table)
    name = unique_name("sd")
    shards = {"pg": DelayedQueue(engines[0], name, table_name=table),
              "maria": DelayedQueue(engines[2], name, table_name=table),
              "private": DelayedQueue(private, name, table_name=table)}
    sharded = ShardedQueue(shards)
    offered, handled = set(), collections.Counter()
    lost_while_down = []
    lock = threading.Lock()
    down, back, stop_producing = threading.Event(), threading.Event(), threading.Event()
    handled_during_outage = []
    failures = []  # of the producers: none expected

    def produce(prefix: str) -> None:
        try:
            produce_until_stopped(prefix)
        except BaseException as exc:
            failures.append(exc)
            raise

    def produce_until_stopped(prefix: str) -> None:
        n = 0
        while not stop_producing.is_set():
            batch = [Message(f"{prefix}{n + i}", n + i) for i in range(20)]
            n += 20
            try:
                sharded.offer_many(batch)
                ok = batch
            except ShardUnavailableError as exc:
                assert exc.shard == "private" and down.is_set()
                assert all((o is None) == (sharded.route(m.key) == "private")
                           for m, o in zip(batch, exc.outcomes, strict=True))
                ok = [m for m, o in zip(batch, exc.outcomes, strict=True) if o is not None]
                lost_while_down.extend(m for m in batch if m not in ok)
            with lock:
                offered.update(m.key for m in ok)
            time.sleep(0.005)

    def handler(envelope):
        with lock:
            handled[envelope.key] += 1
            if down.is_set() and not back.is_set():
                handled_during_outage.append(envelope.key)

    worker = Worker(sharded, handler, concurrency=4, batch_size=20, **FAST)
    consumer = threading.Thread(target=worker.run, kwargs={"signals": False})
    producers = [threading.Thread(target=produce, args=(p,)) for p in ("x", "y")]
    try:
        consumer.start()
        for t in producers:
            t.start()

        def running():  # fails the wait at once when a thread of the run has died
            assert not failures
            assert consumer.is_alive()
            assert stop_producing.is_set() or all(t.is_alive() for t in producers)

        wait_for(lambda: len(handled) > 300, 60, "300 handled", meanwhile=running)
        down.set()
        server.stop()
        wait_for(lambda: len(lost_while_down) > 20
                 and sum(sharded.route(k) != "private" for k in handled_during_outage) > 200,
                 60, "offers lost and others handled while the shard is down",
                 meanwhile=running)
        with pytest.raises(ShardUnavailableError, match="'private'"):
            sharded.offer(next(f"z{i}" for i in range(1000)
                               if sharded.route(f"z{i}") == "private"), 1)
        server.start()
        back.set()
        wait_for(lambda: len(handled) > len(offered) // 2 + 300, 60,
                 "half of what was offered handled", meanwhile=running)
        stop_producing.set()
        for t in producers:
            t.join(30)
        sharded.offer_many(lost_while_down)  # the producer's retry, now the shard is back
        with lock:
            offered.update(m.key for m in lost_while_down)
        wait_for(lambda: set(handled) >= offered, 90, "every offer handled", meanwhile=running)
    finally:
        stop_producing.set()
        worker.stop()
        consumer.join(60)
        private.dispose()
        server.destroy()
    assert not consumer.is_alive()
    assert set(handled) == offered
    assert any(sharded.route(k) == "private" for k in offered)


@BLOCKING
def test_reshard_from_two_to_three_shards_under_load_moves_the_expected_keys(shard_engines,
                                                                           shard_urls, capsys):
    """2 shards (the suite's PostgreSQL database, MariaDB) become 3 (SECOND_PG added) while
    producers offer and a worker consumes through a queue that knows the old list; before the
    reshard a moved key is found (and updated) on its old shard; after it every message is on
    its new shard, none lost, and a second run has nothing to do."""
    engines, table = shard_engines
    name = unique_name("rs")
    pg, pg2, maria = (DelayedQueue(e, name, table_name=table) for e in engines)
    old = ShardedQueue([pg, maria])
    later = datetime.now(UTC) + timedelta(hours=1)  # waiting messages: what must move
    waiting = [f"wait{i}" for i in range(3000)]
    old.offer_many([Message(k, {"k": k}, later) for k in waiting])

    new = ShardedQueue([pg, maria, pg2], previous=[pg, maria])
    moves = [k for k in waiting if new.route(k) != old.route(k)]
    assert moves and all(new.route(k) == new.route(moves[0]) == shard_name(pg2) for k in moves)
    assert abs(len(moves) - len(waiting) / 3) < 0.06 * len(waiting)

    # until the reshard, the old copy is what get / offer find
    k1, k2, k3 = moves[:3]
    assert new.get(k1).payload == {"k": k1} and new.contains(k1)
    assert new.offer(k1, "changed", later, update=False) is OfferOutcome.IGNORED
    assert new.offer(k2, "changed", later) is OfferOutcome.UPDATED
    assert new.get(k2).payload == "changed" and not pg2.contains(k1)
    assert pg2.contains(k2) and not old.contains(k2)  # written on its new shard, old gone
    # a copy left by an interrupted run (copied, not yet deleted) is not doubled
    source = old.shards[old.route(k3)]
    with source.engine.connect() as conn:
        row = conn.execute(sa.select(source.dao.table).where(
            source.dao.table.c.pkind == source.pkind, source.dao.table.c.pkey == k3)).one()
    with pg2.engine.begin() as conn:
        copy_op(pg2, [row])(conn)

    handled = collections.Counter()
    offered = []
    lock = threading.Lock()
    stop = threading.Event()

    def produce():
        n = 0
        while not stop.is_set():
            batch = [Message(f"live{n + i}", n + i) for i in range(25)]
            new.offer_many(batch)
            with lock:
                offered.extend(m.key for m in batch)
            n += 25

    def handler(envelope):
        with lock:
            handled[envelope.key] += 1

    worker = Worker(new, handler, concurrency=4, batch_size=50, **FAST)
    threads = [threading.Thread(target=worker.run, kwargs={"signals": False}),
               threading.Thread(target=produce)]
    for t in threads:
        t.start()
    try:
        args = ["reshard", "--queue", name, "--table", table, "--batch", "200",
                "--from", shard_urls[0], shard_urls[2],
                "--to", shard_urls[0], shard_urls[2], shard_urls[1]]
        assert cli.main(args) == 0
        first = capsys.readouterr().out
        stop.set()
        threads[1].join(30)
        deadline = time.monotonic() + 60
        while True:
            with lock:
                if set(handled) >= set(offered):
                    break
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        stop.set()
        worker.stop()
        for t in threads:
            t.join(30)
    assert "already on their shard 1," in first and f"moved {len(moves) - 2}," in first
    assert cli.main(args) == 0
    assert capsys.readouterr().out.startswith("moved 0, already on their shard 0, left in")

    # every waiting message is once, on its new shard, as it was offered (or updated)
    for shard in (pg, maria, pg2):
        mine = {k for k in waiting if new.route(k) == shard_name(shard)}
        with shard.engine.connect() as conn:
            keys = [k for k in conn.scalars(sa.select(shard.dao.table.c.pkey).where(
                shard.dao.table.c.pkind == shard.pkind)) if k.startswith("wait")]
        assert len(keys) == len(set(keys)) and set(keys) == mine
    assert new.get(k2).payload == "changed" and new.get(k1).payload == {"k": k1}
    assert new.get(k3).scheduled_at == later.replace(microsecond=later.microsecond // 1000
                                                     * 1000)
    assert set(handled) == set(offered)  # every live message handled, none lost


@BLOCKING
@_needs("sqlite", "postgresql")
def test_an_unreachable_shard_is_named_and_the_others_go_on(tmp_path):
    """No server listens on the dead shard's port: its keys fail with its name, the live
    shard's keys are written and claimed; a poll raises only once every shard is down."""
    live = sa.create_engine(f"sqlite:///{tmp_path}/live.db")
    create_schema(live)
    dead = sa.create_engine(f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/none")
    sharded = ShardedQueue({"live": DelayedQueue(live, "e"), "dead": DelayedQueue(dead, "e")})
    keys = [f"k{i}" for i in range(40)]
    with pytest.raises(ShardUnavailableError, match="shard 'dead' is unavailable") as info:
        sharded.offer_many([Message(k, 1) for k in keys])
    assert info.value.shard == "dead"
    assert [o is None for o in info.value.outcomes] == [sharded.route(k) == "dead" for k in keys]
    alive = {k for k in keys if sharded.route(k) == "live"}
    assert alive and sharded.offer(min(alive), 2) is OfferOutcome.UPDATED
    got = sharded.poll_many(100)
    assert {e.key for e in got} == alive
    assert sharded.ack_many(got) == len(alive)
    with pytest.raises(ShardUnavailableError, match="'dead'"):
        sharded.get(next(k for k in keys if k not in alive))

    only_dead = ShardedQueue({"dead": DelayedQueue(dead, "e")})
    with pytest.raises(ShardUnavailableError, match="every shard is unavailable"):
        only_dead.poll()
    live.dispose()
    dead.dispose()


@BLOCKING
def test_a_transactional_worker_takes_each_shard_in_its_own_transaction(sharded):
    sharded.offer_many([Message(f"t{i}", i) for i in range(90)])
    seen = collections.Counter()
    lock = threading.Lock()

    def handler(envelope, connection):
        assert connection.engine is envelope.queue.engine  # the shard's own transaction
        with lock:
            seen[sharded.shard_of(envelope)] += 1

    worker = Worker(sharded, handler, concurrency=2, batch_size=10,
                    mode=ProcessingMode.TRANSACTIONAL, **FAST)
    assert worker.drain() == 90
    assert seen == collections.Counter(sharded.route(f"t{i}") for i in range(90))
    assert sharded.stats().due == 0


@BLOCKING
def test_a_worker_takes_a_sharded_queue_beside_a_plain_one(sharded, shard_engines):
    engines, table = shard_engines
    recurring = DelayedQueue(engines[0], unique_name("cron"), table_name=table)
    sharded.offer_many([Message(f"s{i}", i) for i in range(60)])
    recurring.offer_many([Message(f"r{i}", i) for i in range(10)])
    seen = []
    lock = threading.Lock()

    def handler(envelope):
        with lock:
            seen.append(envelope.key)

    worker = Worker([sharded, recurring], handler, concurrency=2,
                    limits={recurring.name: 1}, **FAST)
    assert set(worker.queues) == {*sharded.shards, recurring.name}
    assert worker.drain() == 70
    assert sorted(seen) == sorted([f"s{i}" for i in range(60)] + [f"r{i}" for i in range(10)])


@ASYNCIO
@_needs("sqlite")
def test_the_async_front_raises_a_shard_call_that_was_cancelled(tmp_path, monkeypatch):
    # asyncio hands back a shard's cancelled call as a CancelledError among the results (not
    # an Exception): the call fails, not the shard's answer
    async def scenario() -> None:
        engines = [create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/{n}.db")
                   for n in ("one", "two")]
        try:
            for engine in engines:
                await create_schema_async(engine)
            one, two = (AsyncDelayedQueue(engine, "e") for engine in engines)

            async def cancelled() -> None:
                raise asyncio.CancelledError

            monkeypatch.setattr(two, "pause", cancelled)
            with pytest.raises(asyncio.CancelledError):
                await AsyncShardedQueue({"one": one, "two": two}).pause()
        finally:
            for engine in engines:
                await engine.dispose()

    asyncio.run(scenario())


@ASYNCIO
@_needs("sqlite", "postgresql")
def test_the_async_front_names_an_unreachable_shard_too(tmp_path):
    async def scenario() -> None:
        live = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/live.db")
        dead = create_async_engine(f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/x")
        try:
            await create_schema_async(live)
            sharded = AsyncShardedQueue({"live": AsyncDelayedQueue(live, "e"),
                                         "dead": AsyncDelayedQueue(dead, "e")})
            keys = [f"k{i}" for i in range(40)]
            with pytest.raises(ShardUnavailableError, match="shard 'dead'") as info:
                await sharded.offer_many([Message(k, 1) for k in keys])
            assert [o is None for o in info.value.outcomes] == [
                sharded.route(k) == "dead" for k in keys]
            got = await sharded.poll_many(100)
            assert {e.key for e in got} == {k for k in keys if sharded.route(k) == "live"}
            assert await sharded.ack_many(got) == len(got)
        finally:
            await live.dispose()
            await dead.dispose()

    asyncio.run(scenario())


@BLOCKING
def test_reshard_leaves_a_key_a_producer_writes_on_the_new_shard_during_the_copy(
        shard_engines):
    """A producer writes a moved key on its new shard after the copy looked for it there and
    before its insert: the copy keeps the producer's (newer) message and moves the rest."""
    engines, table = shard_engines
    pg, maria = engines[0], engines[2]
    name = unique_name("race")
    old_a, new_b = DelayedQueue(pg, name, table_name=table), DelayedQueue(maria, name,
                                                                          table_name=table)
    sharded = ShardedQueue({"a": old_a, "b": new_b}, previous={"a": old_a})
    moving = [k for k in (f"k{i}" for i in range(200)) if sharded.route(k) == "b"][:20]
    old_a.offer_many([Message(k, "old") for k in moving])
    raced = moving[7]
    producer = DelayedQueue(maria, name, table_name=table)
    wrote, racing = [], []

    def before_insert(conn, cursor, statement, *args):
        if statement.lstrip().upper().startswith(f"INSERT INTO {table.upper()} ") and not racing:
            racing.append(raced)  # once: the producer's own insert passes here too
            wrote.append(producer.offer(raced, "new"))  # on a connection of its own

    sa.event.listen(maria, "before_cursor_execute", before_insert)
    try:
        report = sharded.reshard()
    finally:
        sa.event.remove(maria, "before_cursor_execute", before_insert)
    assert wrote == [OfferOutcome.CREATED]
    assert (report.moved, report.already_there, report.left) == (len(moving) - 1, 1, 0)
    assert new_b.get(raced).payload == "new"
    assert all(new_b.get(k).payload == "old" for k in moving if k != raced)
    assert not any(old_a.contains(k) for k in moving)
