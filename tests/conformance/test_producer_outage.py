"""A producer rides out a database restart by default, and a caller's own transaction does not.

An offer made without ``connection=`` waits out a database it reached before for up to its
patience (``sqldelay.outages``, 10 seconds by default) and then succeeds; an offer in the
caller's transaction raises at once, and the caller's retry of the whole transaction on a new
connection succeeds. A worker's own calls do not wait inside: it notices an outage and stops
at once, whatever the producers' patience; a wait for a task's result ends at its timeout.
The servers are private ones (``test_worker_restart``), stopped and restarted here.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

import pytest
import sqlalchemy as sa

from sqldelay import (
    DEFAULT_PATIENCE,
    DelayedQueue,
    Message,
    OfferOutcome,
    create_schema,
    set_default_patience,
)
from sqldelay.tasks import Tasks

from .test_worker_restart import RESTARTS, OutageSeen, _selected, started

SELECTED = [(database, server, driver) for database, server, driver in RESTARTS
            if _selected(database, driver)]


class Retried(logging.Handler):
    """Set when sqldelay's executor retries a call (it logs each retry)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("retrying after"):
            self.event.set()


@pytest.fixture
def retried():
    logger = logging.getLogger("sqldelay")
    handler, level = Retried(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler.event
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


SERVERS = pytest.mark.parametrize(
    ("server_class", "driver"), [(s, d) for _, s, d in SELECTED],
    ids=[db if d is None else f"{db}-{d}" for db, _, d in SELECTED])


@SERVERS
def test_an_offer_rides_out_a_restart_and_a_callers_transaction_raises_at_once(
        server_class, driver, retried):
    server, engine, front = started(server_class, driver)
    try:
        q = front.queue("outage")  # no patience given: the default
        assert q.offer("before", 1) is OfferOutcome.CREATED  # the database has been reached
        with front.connect() as conn:
            assert q.offer("mine", 1, connection=conn) is OfferOutcome.CREATED
            server.stop()
            began = time.monotonic()
            with pytest.raises((sa.exc.OperationalError, sa.exc.InterfaceError)):
                q.offer("mine", 2, connection=conn)
            # at once: not after waiting out the outage as a call of its own would
            assert time.monotonic() - began < DEFAULT_PATIENCE / 2
            retried.clear()  # what the caller's call did is no retry of sqldelay's

        outcome: list = []

        def produce() -> None:
            try:
                outcome.append(q.offer("during", 2))
            except Exception as exc:
                outcome.append(exc)

        producer = threading.Thread(target=produce)
        producer.start()
        try:
            deadline = time.monotonic() + 30
            while not retried.wait(0.05):  # the offer met the outage and waits it out
                assert producer.is_alive(), f"the offer did not wait: {outcome}"
                assert time.monotonic() < deadline, "the offer never met the outage"
        finally:
            server.start()
            producer.join(60)
        assert outcome == [OfferOutcome.CREATED]

        # the caller retries its whole transaction, on a new connection
        with front.connect() as conn:
            assert q.offer("mine", 2, connection=conn) is OfferOutcome.CREATED
            conn.commit()
        assert {key: q.get(key).payload for key in ("before", "during", "mine")} \
            == {"before": 1, "during": 2, "mine": 2}
    finally:
        front.close()
        engine.dispose()
        server.destroy()


@SERVERS
def test_a_worker_notices_an_outage_and_stops_at_once_however_patient_the_producers(
        server_class, driver):
    server, engine, front = started(server_class, driver)
    set_default_patience(120)  # a call of the worker's own that waited would outlast the test
    try:
        q = front.queue("stopping")
        q.offer_many([Message(f"m{i}", i) for i in range(20)])
        handled, outage = threading.Semaphore(0), OutageSeen()
        worker = front.worker(q, lambda envelope: handled.release(), concurrency=2,
                              heartbeat=timedelta(milliseconds=200),
                              # acks still to send are tried for this long and 5 s more
                              grace_period=timedelta(seconds=1),
                              idle_poll=timedelta(milliseconds=200), listeners=[outage],
                              # its claims notice the outage, not its LISTEN connection
                              wake_ups=False)
        thread = threading.Thread(target=worker.run, kwargs={"signals": False}, daemon=True)
        thread.start()
        try:
            for _ in range(20):
                assert handled.acquire(timeout=30)
            server.stop()
            # it reports the outage (listeners, logs) within its backoff, not its patience
            assert outage.event.wait(30), "the worker did not notice the database was gone"
        finally:
            began = time.monotonic()
            worker.stop()
            thread.join(60)
            stopped_in = time.monotonic() - began
            server.start()  # (a private server is destroyed running)
        assert not thread.is_alive()
        assert stopped_in < 15  # the grace period, the shutdown's 5 s, and time to spare
    finally:
        set_default_patience(DEFAULT_PATIENCE)
        front.close()
        engine.dispose()
        server.destroy()


@pytest.mark.parametrize("server_class", [s for db, s, d in SELECTED if d is None],
                         ids=[db for db, s, d in SELECTED if d is None])
def test_a_wait_for_a_result_ends_at_its_timeout_during_an_outage(server_class):
    server = server_class()
    engine = sa.create_engine(server.url)
    create_schema(engine)
    set_default_patience(120)  # a read that waited out the outage would outlast the timeout
    try:
        tasks = Tasks(DelayedQueue(engine, "results"), results=True)

        @tasks.task(name="noop")
        def noop() -> None:
            return None

        handle = noop.defer()  # the database has been reached
        server.stop()
        began = time.monotonic()
        try:
            with pytest.raises((TimeoutError, sa.exc.OperationalError, sa.exc.InterfaceError)):
                handle.result(timeout=2)
        finally:
            waited = time.monotonic() - began
            server.start()  # (a private server is destroyed running)
        assert waited < 10  # the timeout and a last attempt's connect, not the patience
    finally:
        set_default_patience(DEFAULT_PATIENCE)
        engine.dispose()
        server.destroy()
