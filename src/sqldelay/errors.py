"""The exceptions sqldelay raises on purpose."""


class SqlDelayError(Exception):
    """Base class of every error raised by sqldelay itself."""


class InvalidArgumentError(SqlDelayError, ValueError):
    """Bad input, rejected before the database is touched."""


class PayloadError(InvalidArgumentError):
    """The serializer cannot encode (or decode) a payload."""


class UnsupportedDialectError(SqlDelayError):
    """The engine's database has no QueueDao."""


class SchemaMissingError(SqlDelayError):
    """A table the queue needs (its queue table, or its history table) does not exist yet."""
