"""A name → factory registry with lazy imports, for the swappable parts of the agent layer.

Entries are ``"module:attribute"`` strings imported on first use (so listing or validating names
imports nothing heavy) or callables registered at run time. The registries of tools and parsers
are instances of this class.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to factories of ``T``; string targets are imported lazily."""

    def __init__(self, kind: str, entries: dict[str, str] | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, str | Callable[..., T]] = dict(entries or {})

    def register(self, name: str, target: str | Callable[..., T]) -> None:
        """Add or replace ``name``; ``target`` is ``"module:attr"`` or a factory."""
        self._entries[name] = target

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def resolve(self, name: str) -> Callable[..., T]:
        """The factory for ``name`` (imports it if needed)."""
        try:
            target = self._entries[name]
        except KeyError:
            known = ", ".join(self.names()) or "none"
            raise KeyError(f"unknown {self.kind} {name!r}; registered: {known}") from None
        if isinstance(target, str):
            module, _, attr = target.partition(":")
            target = getattr(importlib.import_module(module), attr)
            self._entries[name] = target
        return target

    def create(self, name: str, **kwargs: Any) -> T:
        """Build the ``name`` entry with ``kwargs``."""
        return self.resolve(name)(**kwargs)
