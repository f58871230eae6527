"""The exceptions sqldelay raises on purpose."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .messages import OfferOutcome


class SqlDelayError(Exception):
    """Base class of every error raised by sqldelay itself."""


class InvalidArgumentError(SqlDelayError, ValueError):
    """Bad input, rejected before the database is touched."""


class PayloadError(InvalidArgumentError):
    """The serializer cannot encode (or decode) a payload."""


class UnsupportedDialectError(SqlDelayError):
    """The engine's database has no QueueDao."""


class UnsupportedFeatureError(SqlDelayError):
    """The database cannot keep the promise of a feature (a concurrency cap on a Galera
    cluster): refused rather than kept loosely."""


class SchemaMissingError(SqlDelayError):
    """A table the queue needs (its queue table, or its history table) does not exist yet."""


class ShardUnavailableError(SqlDelayError):
    """A shard of a sharded queue cannot be reached; ``shard`` names it. From ``offer_many``,
    ``outcomes`` holds the outcomes of the messages the other shards took (None for those of
    the unreachable shards), in input order."""

    def __init__(self, message: str, shard: str,
                 outcomes: list[OfferOutcome | None] | None = None) -> None:
        super().__init__(message)
        self.shard = shard
        self.outcomes = outcomes


# ---- signals between the dialect layer and the front ends: caught there, never raised to a
# caller of sqldelay


class NeedsTransaction(Exception):  # noqa: N818 - a signal to the caller, not an error
    """The claim found a controlled queue while running in autocommit: run it again in a
    transaction (the controlled claim takes several statements that must commit together)."""


class Raced(NeedsTransaction):
    """A rate-limited claim found its tokens spent by a concurrent claim when it charged the
    bucket: roll it back and run it again, locking the settings first."""
