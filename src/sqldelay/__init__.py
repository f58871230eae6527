"""sqldelay: a durable delayed message queue on any SQLAlchemy 2.x engine."""

from .clock import Clock, FakeClock, SystemClock
from .errors import (
    InvalidArgumentError,
    PayloadError,
    SchemaMissingError,
    SqlDelayError,
    UnsupportedDialectError,
)
from .messages import Delivery, Envelope, Message, OfferOutcome, QueuedMessage, QueueStats
from .queue import DelayedQueue
from .schema import create_schema, create_table_op, drop_schema, drop_table_op, queue_table
from .serializers import BytesSerializer, JsonSerializer, Serializer, StrSerializer

__all__ = [
    "BytesSerializer", "Clock", "DelayedQueue", "Delivery", "Envelope", "FakeClock",
    "InvalidArgumentError", "JsonSerializer", "Message", "OfferOutcome", "PayloadError",
    "QueueStats", "QueuedMessage", "SchemaMissingError", "Serializer", "SqlDelayError",
    "StrSerializer", "SystemClock", "UnsupportedDialectError", "create_schema",
    "create_table_op", "drop_schema", "drop_table_op", "queue_table",
]
