"""A name → object registry with lazy imports, behind every swappable part of agentrt.

Attention backends, serving backends, weight formats, tool-call parsers, tools and the
lowerings of ``compile()`` are each one :class:`Registry`. An entry is a ``"module:attr"``
string, imported on first :meth:`~Registry.get` (so listing or validating names imports
nothing heavy: a CPU install never imports GPU code), or the object itself (a class, a
factory) registered at run time::

    PARSERS = Registry("parser", {"react": "agentrt.agent.parsers.react:ReActParser"})
    PARSERS.check("react")              # validates a CLI / config name, imports nothing
    parser = PARSERS.create("react")    # imports the module, calls the class
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

__all__ = ["Registry", "UnknownNameError"]

T = TypeVar("T")


class UnknownNameError(KeyError, ValueError):
    """A name no registry entry has; the message lists the choices.

    Both a ``ValueError`` (a bad argument) and a ``KeyError`` (a failed lookup), so callers
    written against either keep working.
    """

    def __str__(self) -> str:
        return str(self.args[0])


class Registry(Generic[T]):
    """Names → ``T`` (a class or factory); ``"module:attr"`` entries are imported lazily.

    ``kind`` names what the registry holds, for error messages ("attention backend").
    """

    def __init__(self, kind: str, entries: Mapping[str, str | T] | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, str | T] = dict(entries or {})

    def register(self, name: str, target: str | T) -> None:
        """Add or replace ``name``; ``target`` is ``"module:attr"`` or the object itself."""
        self._entries[name] = target

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._entries)

    def check(self, name: str, *, also: tuple[str, ...] = ()) -> str:
        """``name`` if it is registered (or one of the extra names ``also``, e.g. "auto"),
        else :class:`UnknownNameError`. Imports nothing: for validating CLI and config."""
        if name in self._entries or name in also:
            return name
        choices = ", ".join(repr(n) for n in [*also, *self.names()]) or "none registered"
        raise UnknownNameError(f"unknown {self.kind} {name!r}; choose from {choices}")

    def get(self, name: str) -> T:
        """The object registered as ``name``, importing it on first use."""
        self.check(name)
        target = self._entries[name]
        if isinstance(target, str):
            module, sep, attr = target.partition(":")
            if not sep:
                raise ValueError(f"{self.kind} {name!r}: {target!r} is not 'module:attr'")
            target = getattr(importlib.import_module(module), attr)
            self._entries[name] = target
        return target

    def create(self, name: str, /, **kwargs: Any) -> Any:
        """Call the ``name`` entry (a class or factory) with ``kwargs``."""
        factory: Callable[..., Any] = self.get(name)  # type: ignore[assignment]
        return factory(**kwargs)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"
