"""The dialect contract (``sqldelay.dialects.contract.Dialect``) is the list a new database
starts from: every registered dialect class has each hook, with the contract's parameters,
and overrides nothing the contract leaves out."""

from __future__ import annotations

import inspect

import pytest

from sqldelay.dialects import REGISTRY, QueueDao
from sqldelay.dialects.contract import Dialect

HOOKS = sorted({*Dialect.__annotations__,
                *(n for n in vars(Dialect) if not n.startswith("_"))})
CLASSES = sorted(set(REGISTRY.values()), key=lambda c: c.__name__)


def _kind(owner: type, name: str) -> str:
    found = inspect.getattr_static(owner, name)
    for kind in (classmethod, staticmethod, property):
        if isinstance(found, kind):
            return kind.__name__
    return "method" if callable(found) else "value"


def _parameters(owner: type, name: str) -> list[str]:
    found = inspect.getattr_static(owner, name)
    function = found.fget if isinstance(found, property) else getattr(found, "__func__", found)
    return [p.name for p in inspect.signature(function).parameters.values()]


def test_the_contract_lists_hooks():
    assert len(HOOKS) > 50 and "claim_plain" in HOOKS and "notifications" in HOOKS


@pytest.mark.parametrize("dao", CLASSES, ids=lambda c: c.__name__)
def test_every_dialect_class_provides_every_hook_as_the_contract_says(dao):
    for name in HOOKS:
        assert hasattr(dao, name), f"{dao.__name__} lacks {name}"
        expected = "value" if name in Dialect.__annotations__ else _kind(Dialect, name)
        # a read-only property of the contract may be a value of the class
        allowed = {expected, "value"} if expected == "property" else {expected}
        assert _kind(dao, name) in allowed, f"{dao.__name__}.{name} is a {_kind(dao, name)}"
        if _kind(dao, name) != "value":
            assert _parameters(dao, name) == _parameters(Dialect, name), (
                f"{dao.__name__}.{name} takes other parameters than the contract's")


@pytest.mark.parametrize("dao", CLASSES, ids=lambda c: c.__name__)
def test_a_dialect_class_overrides_only_hooks_of_the_contract(dao):
    own = {name for klass in dao.__mro__[:dao.__mro__.index(QueueDao)]
           for name in vars(klass) if not name.startswith("_") and hasattr(QueueDao, name)}
    assert own <= set(HOOKS), f"{dao.__name__} overrides what the contract does not list"
