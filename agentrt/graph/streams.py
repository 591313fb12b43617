"""ItemStream: the items of a splittable output as they are decoded (decoding pipelining).

The Decoding node's op returns the stream at once and fills it in a background task; each
PartialDecoding node awaits one item, the list parser awaits them all. Readers of an item
past the end get ``SKIPPED``; a failure while decoding reaches every reader.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio

__all__ = ["ItemStream"]


class ItemStream:
    """An append-only list that readers can await item by item."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.error: BaseException | None = None
        self.is_closed = False
        self._changed = anyio.Event()

    async def fill(self, source: AsyncIterator[Any]) -> None:
        """Append every item of ``source``, then close (or record its error)."""
        try:
            async for item in source:
                self.items.append(item)
                self._notify()
        except Exception as exc:  # noqa: BLE001 - readers re-raise it
            self.error = exc
        finally:
            self.is_closed = True
            self._notify()

    async def item(self, i: int) -> Any:
        """Item ``i`` as soon as it exists; ``SKIPPED`` if the stream ends before it."""
        from agentrt.graph.runtime import SKIPPED

        while len(self.items) <= i and not self.is_closed:
            await self._changed.wait()
        self._raise()
        return self.items[i] if i < len(self.items) else SKIPPED

    async def all(self) -> list[Any]:
        """Every item, once the stream is closed."""
        while not self.is_closed:
            await self._changed.wait()
        self._raise()
        return list(self.items)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def _raise(self) -> None:
        if self.error is not None:
            raise self.error
