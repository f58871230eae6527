"""sqldelay: a durable delayed message queue on any SQLAlchemy 2.x engine."""

from .clock import Clock, FakeClock, SystemClock
from .cron import CronHandle, CronMessage, CronService, InstalledSchedule
from .dead_letters import DeadLetter, DeadLetters
from .errors import (
    InvalidArgumentError,
    PayloadError,
    SchemaMissingError,
    SqlDelayError,
    UnsupportedDialectError,
)
from .listeners import LoggingListener, WorkerListener
from .messages import Delivery, Envelope, Message, OfferOutcome, QueuedMessage, QueueStats
from .queue import DelayedQueue
from .retry import RetryPolicy
from .schema import create_schema, create_table_op, drop_schema, drop_table_op, queue_table
from .serializers import BytesSerializer, JsonSerializer, Serializer, StrSerializer
from .worker import ProcessingMode, Worker

__all__ = [
    "BytesSerializer", "Clock", "DeadLetter", "DeadLetters", "DelayedQueue", "Delivery",
    "Envelope", "FakeClock", "LoggingListener", "ProcessingMode", "RetryPolicy", "Worker",
    "WorkerListener",
    "InvalidArgumentError", "JsonSerializer", "Message", "OfferOutcome", "PayloadError",
    "QueueStats", "QueuedMessage", "SchemaMissingError", "Serializer", "SqlDelayError",
    "StrSerializer", "SystemClock", "UnsupportedDialectError", "create_schema",
    "create_table_op", "drop_schema", "drop_table_op", "queue_table",
    "CronHandle", "CronMessage", "CronService", "InstalledSchedule",
]
