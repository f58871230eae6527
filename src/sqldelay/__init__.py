"""sqldelay: a durable delayed message queue on any SQLAlchemy 2.x engine.

Two front ends over the same statements: ``DelayedQueue``, ``Worker``, ``CronService`` and
``DeadLetters`` (and ``Inspector``) on a blocking ``Engine``; ``AsyncDelayedQueue``,
``AsyncWorker``, ``AsyncCronService`` and ``AsyncDeadLetters`` (``AsyncInspector``) on an
asyncio ``AsyncEngine``.
"""

from .clock import Clock, DatabaseClock, FakeClock, SystemClock
from .cron import CronHandle, CronService
from .cron_async import AsyncCronHandle, AsyncCronService
from .cron_base import CronMessage, InstalledSchedule
from .dead_letters import DeadLetters
from .dead_letters_async import AsyncDeadLetters
from .dead_letters_base import DeadLetter
from .errors import (
    InvalidArgumentError,
    PayloadError,
    SchemaMissingError,
    ShardUnavailableError,
    SqlDelayError,
    UnsupportedDialectError,
    UnsupportedFeatureError,
)
from .history import EventKind, History, HistoryEvent
from .inspection import Inspector
from .inspection_async import AsyncInspector
from .inspection_base import MessagePage, QueuePage, QueueSummary
from .listeners import LoggingListener, QueueListener, WorkerListener
from .messages import (
    AsyncEnvelope,
    Delivery,
    Envelope,
    Message,
    OfferOutcome,
    QueuedMessage,
    QueueStats,
)
from .migrate import create_schema, create_schema_async
from .outages import DEFAULT_PATIENCE, patience, set_default_patience
from .queue import DelayedQueue
from .queue_async import AsyncDelayedQueue
from .retry import RetryPolicy
from .schema import (
    create_table_op,
    drop_schema,
    drop_schema_async,
    drop_table_op,
    queue_table,
)
from .serializers import BytesSerializer, JsonSerializer, Serializer, StrSerializer
from .sharded import ShardedQueue
from .sharded_async import AsyncShardedQueue
from .sharded_base import shard_name, shard_score
from .tasks import Task, TaskHandle, Tasks
from .tasks_async import AsyncTask, AsyncTaskHandle, AsyncTasks
from .tasks_base import (
    ResultError,
    TaskArgumentsError,
    TaskContext,
    TaskFailed,
    TaskResult,
    TaskStatus,
    UnknownTaskError,
)
from .worker import Worker
from .worker_async import AsyncWorker
from .worker_base import ProcessingMode

__all__ = [
    "AsyncTask", "AsyncTaskHandle", "AsyncTasks", "ResultError", "Task", "TaskArgumentsError",
    "TaskContext", "TaskFailed", "TaskHandle", "TaskResult", "TaskStatus", "Tasks",
    "UnknownTaskError",
    "AsyncCronHandle", "AsyncCronService", "AsyncDeadLetters", "AsyncDelayedQueue", "AsyncEnvelope",
    "AsyncInspector", "AsyncShardedQueue", "AsyncWorker", "BytesSerializer", "Clock",
    "CronHandle", "CronMessage", "CronService", "DatabaseClock", "DeadLetter", "DeadLetters",
    "DelayedQueue",
    "Delivery", "Envelope", "EventKind", "FakeClock", "History", "HistoryEvent", "Inspector",
    "InstalledSchedule", "InvalidArgumentError", "JsonSerializer", "LoggingListener", "Message",
    "MessagePage", "OfferOutcome", "PayloadError", "ProcessingMode", "QueueListener",
    "QueuePage", "QueueStats", "QueueSummary", "QueuedMessage", "RetryPolicy", "SchemaMissingError",
    "Serializer", "ShardUnavailableError", "ShardedQueue", "SqlDelayError", "StrSerializer",
    "SystemClock", "UnsupportedDialectError", "UnsupportedFeatureError", "Worker",
    "WorkerListener",
    "create_schema", "create_schema_async", "create_table_op", "drop_schema", "drop_schema_async",
    "drop_table_op", "queue_table", "shard_name", "shard_score",
    "DEFAULT_PATIENCE", "patience", "set_default_patience",
]
