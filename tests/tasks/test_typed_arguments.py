"""Task arguments that are dataclasses or pydantic models where the function's annotations ask
for them: encoded at defer, rebuilt in the worker, and a wrong shape refused at defer."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import pydantic
import pytest

from sqldelay import (
    AsyncDelayedQueue,
    AsyncTasks,
    AsyncWorker,
    DeadLetters,
    DelayedQueue,
    InvalidArgumentError,
    Tasks,
    Worker,
)

from ..conftest import unique_name
from . import run_on_async_engine
from .test_tasks import FAST


@dataclass
class Point:
    x: int
    y: int = 0


@dataclass
class Route:
    name: str
    stops: list[Point] = field(default_factory=list)
    start: Point | None = None


class Customer(pydantic.BaseModel):
    id: int
    email: str
    tags: list[str] = []


@pytest.fixture
def queue(engine, table_name):
    return DelayedQueue(engine, unique_name("typed"), table_name=table_name)


def test_dataclasses_and_models_arrive_as_themselves(queue):
    tasks = Tasks(queue, results=True)
    seen = []

    @tasks.task
    def plan(route: Route, by: dict[str, Point], customer: Customer | None, note: str = ""):
        seen.append((route, by, customer, note))
        return len(route.stops)

    route = Route("r1", [Point(1, 2), Point(3)], start=Point(0, 0))
    handle = plan.defer(route=route, by={"home": Point(5, 6)},
                        customer=Customer(id=7, email="a@b.c"))
    positional = plan.enqueue([{"name": "r2", "stops": [{"x": 9}]}, {}, {"id": "8",
                                                                        "email": "d@e.f"}])
    stored = queue.get(handle.key).payload["kwargs"]  # JSON objects, as the queue stores them
    assert stored["route"] == {"name": "r1", "stops": [{"x": 1, "y": 2}, {"x": 3, "y": 0}],
                               "start": {"x": 0, "y": 0}}
    assert stored["customer"] == {"id": 7, "email": "a@b.c", "tags": []}
    Worker(queue, tasks, retry=FAST).drain()
    assert handle.result(timeout=1) == 2 and positional.result(timeout=1) == 1
    by_name = {s[0].name: s for s in seen}
    assert by_name["r1"] == (route, {"home": Point(5, 6)}, Customer(id=7, email="a@b.c"), "")
    # a mapping that builds one is taken, and rebuilt as one
    assert by_name["r2"][0] == Route("r2", [Point(9)])
    assert by_name["r2"][2] == Customer(id=8, email="d@e.f")


def test_a_wrong_shape_is_refused_at_defer(queue):
    tasks = Tasks(queue)

    @tasks.task
    def plan(route: Route, customer: Customer | None = None):
        pass

    cases = [({"route": Point(1)}, "argument 'route': expected a Route, got Point"),
             ({"route": {"name": "r", "stops": [{"z": 1}]}}, "Point has no field.*'z'"),
             ({"route": {"stops": []}}, "argument 'route': Route: .*name"),
             ({"route": Route("r", stops=Point(1))}, "expected a list, got Point"),
             ({"route": Route("r"), "customer": {"id": "x", "email": "e"}},
              "argument 'customer': Customer: .*id"),
             ({"route": Route("r", start=Point(object()))}, "'route' is not JSON-serialisable")]
    for kwargs, error in cases:
        with pytest.raises(InvalidArgumentError, match=error):
            plan.defer(**kwargs)
    with pytest.raises(InvalidArgumentError, match="argument .route.: expected a Route, got int"):
        plan.defer_many([{"route": Route("fine")}, {"route": 3}])
    assert queue.stats().due == 0  # nothing written


def test_a_stored_shape_that_no_longer_fits_is_a_dead_letter(queue):
    tasks = Tasks(queue)

    @tasks.task(name="plan")
    def plan(route: Route):
        pass

    queue.offer("old", {"task": "plan", "kwargs": {"route": {"name": "r", "legs": 3}}})
    Worker(queue, tasks, retry=FAST).drain()
    [letter] = DeadLetters.of(queue).list(queue.name)
    assert letter.attempts == 1
    assert "TaskArgumentsError" in letter.last_error and "no field(s) 'legs'" in letter.last_error


def test_a_recurring_task_takes_a_dataclass(engine, table_name):
    queue = DelayedQueue(engine, unique_name("typed"), table_name=table_name)
    tasks = Tasks(queue)

    @tasks.task
    def plan(route: Route):
        pass

    cron = queue.cron()
    try:
        with pytest.raises(InvalidArgumentError, match="expected a Route"):
            cron.install_task(plan, timedelta(hours=1), kwargs={"route": 1})
        cron.install_task(plan, timedelta(hours=1), kwargs={"route": Route("r")}, ahead=1)
        [installed] = cron.list()
        assert installed.pending == 1
    finally:
        cron.close()


def test_async_tasks_take_them_too(async_url, table_name):
    async def scenario(engine):
        queue = AsyncDelayedQueue(engine, unique_name("atyped"), table_name=table_name)
        tasks = AsyncTasks(queue, results=True)

        @tasks.task
        async def where(p: Point) -> int:
            assert isinstance(p, Point)
            return p.x + p.y

        with pytest.raises(InvalidArgumentError, match="expected a Point"):
            await where.defer(p=[1, 2])
        handle = await where.defer(p=Point(2, 3))
        await AsyncWorker(queue, tasks, retry=FAST).drain()
        assert await handle.result(timeout=1) == 5

    run_on_async_engine(async_url, scenario)
