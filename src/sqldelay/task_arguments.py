"""Task arguments that are dataclasses or pydantic models, where the function's annotations
ask for them: encoded to JSON at ``defer`` and rebuilt in the worker (``tasks_base``).

A parameter annotated with a dataclass or a pydantic model (``BaseModel``), or ``X | None``,
``list[X]`` or ``dict[str, X]`` of one, takes an instance (or a mapping that builds one) and
is stored as a JSON object: a dataclass's ``init`` fields (each converted by its own
annotation, so they nest), a model's ``model_dump(mode="json")``. The worker rebuilds the
instance from it (``cls(**fields)``, ``cls.model_validate``). A value of the wrong shape is an
ArgumentShapeError, which the tasks turn into ``InvalidArgumentError`` at ``defer`` and into
``TaskArgumentsError`` in the worker. Pydantic is never imported here: a model is recognised
by its class's ancestry and used through its own methods (pydantic 2).
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any


class ArgumentShapeError(ValueError):
    """A value that does not fit its parameter's dataclass or model."""


class Codec:
    """Converts one annotated value to JSON and back."""

    def encode(self, value: Any) -> Any:
        raise NotImplementedError

    def decode(self, data: Any) -> Any:
        raise NotImplementedError


class _Dataclass(Codec):
    def __init__(self, cls: type) -> None:
        self.cls = cls
        self._fields: list[tuple[str, Codec | None]] | None = None  # later: types may recurse

    def fields(self) -> list[tuple[str, Codec | None]]:
        if self._fields is None:
            hints = _hints(self.cls)
            self._fields = [(f.name, codec_of(hints.get(f.name)))
                            for f in dataclasses.fields(self.cls) if f.init]
        return self._fields

    def encode(self, value: Any) -> Any:
        if isinstance(value, Mapping):  # a mapping that builds one: checked by building it
            value = self.decode(value)
        if not isinstance(value, self.cls):
            raise ArgumentShapeError(
                f"expected a {self.cls.__qualname__}, got {type(value).__name__}")
        return {name: getattr(value, name) if codec is None else codec.encode(getattr(value, name))
                for name, codec in self.fields()}

    def decode(self, data: Any) -> Any:
        if not isinstance(data, Mapping):
            raise ArgumentShapeError(
                f"{self.cls.__qualname__} is stored as an object, got {type(data).__name__}")
        fields = self.fields()
        unknown = sorted(set(data) - {name for name, _ in fields})
        if unknown:
            raise ArgumentShapeError(
                f"{self.cls.__qualname__} has no field(s) {', '.join(map(repr, unknown))}")
        values = {name: data[name] if codec is None else codec.decode(data[name])
                  for name, codec in fields if name in data}
        try:
            return self.cls(**values)
        except (TypeError, ValueError) as exc:
            raise ArgumentShapeError(f"{self.cls.__qualname__}: {exc}") from None


class _Model(Codec):
    def __init__(self, cls: type) -> None:
        self.cls: Any = cls

    def encode(self, value: Any) -> Any:
        if not isinstance(value, self.cls):
            value = self.decode(value)
        return value.model_dump(mode="json")

    def decode(self, data: Any) -> Any:
        try:
            return self.cls.model_validate(data)
        except ValueError as exc:  # pydantic's ValidationError is one
            raise ArgumentShapeError(f"{self.cls.__qualname__}: {exc}") from None


class _Optional(Codec):
    def __init__(self, inner: Codec) -> None:
        self.inner = inner

    def encode(self, value: Any) -> Any:
        return None if value is None else self.inner.encode(value)

    def decode(self, data: Any) -> Any:
        return None if data is None else self.inner.decode(data)


class _List(Codec):
    def __init__(self, inner: Codec) -> None:
        self.inner = inner

    def encode(self, value: Any) -> Any:
        if not isinstance(value, list | tuple):
            raise ArgumentShapeError(f"expected a list, got {type(value).__name__}")
        return [self.inner.encode(v) for v in value]

    def decode(self, data: Any) -> Any:
        if not isinstance(data, list):
            raise ArgumentShapeError(f"a list is stored as an array, got {type(data).__name__}")
        return [self.inner.decode(v) for v in data]


class _Dict(Codec):
    def __init__(self, inner: Codec) -> None:
        self.inner = inner

    def encode(self, value: Any) -> Any:
        if not isinstance(value, Mapping):
            raise ArgumentShapeError(f"expected a mapping, got {type(value).__name__}")
        return {k: self.inner.encode(v) for k, v in value.items()}

    def decode(self, data: Any) -> Any:
        if not isinstance(data, dict):
            raise ArgumentShapeError(f"a mapping is stored as an object, got {type(data).__name__}")
        return {k: self.inner.decode(v) for k, v in data.items()}


_classes: dict[type, Codec] = {}  # one codec per class: recursive dataclasses share it


def codec_of(hint: Any) -> Codec | None:
    """The codec of an annotation, None where values are stored as they are."""
    if isinstance(hint, type):
        found = _classes.get(hint)
        if found is None:
            if dataclasses.is_dataclass(hint):
                found = _Dataclass(hint)
            elif is_model(hint):
                found = _Model(hint)
            else:
                return None
            _classes[hint] = found
        return found
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        others = [a for a in args if a is not type(None)]
        inner = codec_of(others[0]) if len(others) == 1 < len(args) else None
        return None if inner is None else _Optional(inner)
    if origin is list and len(args) == 1:
        inner = codec_of(args[0])
        return None if inner is None else _List(inner)
    if origin is dict and len(args) == 2:
        inner = codec_of(args[1])
        return None if inner is None else _Dict(inner)
    return None


def is_model(cls: type) -> bool:
    """Whether ``cls`` is a pydantic model (without importing pydantic)."""
    return any(base.__name__ == "BaseModel" and base.__module__.startswith("pydantic")
               for base in cls.__mro__)


def parameter_codecs(fn: Callable[..., Any], signature: inspect.Signature) -> dict[str, Codec]:
    """The codecs of ``signature``'s named parameters whose annotations (in ``fn``) ask for
    dataclasses or models."""
    hints = _hints(fn)
    codecs = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        codec = codec_of(hints.get(param.name))
        if codec is not None:
            codecs[param.name] = codec
    return codecs


def _hints(obj: Any) -> dict[str, Any]:
    """The resolved annotations of a function or class; what is there where some cannot be
    resolved (a name defined later, under TYPE_CHECKING), the classes among them."""
    try:
        return typing.get_type_hints(obj)
    except Exception:
        raw = getattr(obj, "__annotations__", None) or {}
        return {k: v for k, v in raw.items() if not isinstance(v, str)}
