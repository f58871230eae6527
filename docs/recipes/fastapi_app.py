"""A FastAPI app that schedules a reminder in the same transaction as its business write, and
runs an AsyncWorker in its lifespan. Run it with ``uvicorn fastapi_app:app``.

The order and its reminder commit together or not at all: the offer joins the session's
transaction through ``connection=await session.connection()``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

from fastapi import FastAPI, HTTPException
from sqlalchemy import String
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from sqldelay import AsyncDelayedQueue, AsyncWorker, Envelope, create_schema_async

engine = create_async_engine(os.environ.get("DATABASE_URL", "sqlite+aiosqlite:///app.db"))
Session = async_sessionmaker(engine, expire_on_commit=False)
reminders = AsyncDelayedQueue(engine, "reminders")
REMIND_AFTER = timedelta(seconds=float(os.environ.get("REMIND_AFTER_SECONDS", 86_400)))
log = logging.getLogger("shop")


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    item: Mapped[str] = mapped_column(String(100))
    reminded: Mapped[bool] = mapped_column(default=False)


async def send_reminder(envelope: Envelope) -> None:
    """The worker's handler: return to ack, raise to retry later."""
    async with Session.begin() as session:
        order = await session.get(Order, envelope.payload["order"])
        if order is not None:
            order.reminded = True  # in a real shop: send the e-mail here
    log.info("reminded order %s", envelope.payload["order"])


@asynccontextmanager
async def lifespan(app: FastAPI):
    await create_schema_async(engine)
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
    worker = AsyncWorker(reminders, send_reminder, concurrency=10)
    running = asyncio.create_task(worker.run(signals=False))  # the server handles signals
    yield
    worker.stop()  # releases claimed, unstarted messages; running handlers finish
    await running
    await engine.dispose()


app = FastAPI(lifespan=lifespan)


@app.post("/orders")
async def create_order(item: str) -> dict:
    async with Session.begin() as session:
        order = Order(item=item)
        session.add(order)
        await session.flush()  # the order's id
        await reminders.offer(f"order:{order.id}", {"order": order.id},
                              at=datetime.now(UTC) + REMIND_AFTER,
                              connection=await session.connection())
        if item == "":
            raise HTTPException(400, "no item")  # rolls back the order and its reminder
    return {"id": order.id}


@app.get("/orders/{order_id}")
async def get_order(order_id: int) -> dict:
    async with Session() as session:
        order = await session.get(Order, order_id)
    if order is None:
        raise HTTPException(404, "no such order")
    return {"id": order.id, "item": order.item, "reminded": order.reminded}
