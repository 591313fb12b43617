"""The process-wide engines the chat integrations use when they are not given one.

Loading a model is the expensive part, and one :class:`agentrt.Engine` already batches every
caller (threads, asyncio tasks) continuously. So all ``ChatAgentRT`` / ``AgentRT`` instances
without an ``engine=`` share one engine per model and options, created on first use, never at
construction.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from agentrt import Engine

__all__ = ["get_shared_engine"]

_engines: dict[str, Engine] = {}
_lock = threading.Lock()


def get_shared_engine(model: str | None = None, **options: Any) -> Engine:
    """The shared engine for ``model`` (None = the default model) and ``EngineConfig`` options.

    Created on the first call with these arguments, then reused for the life of the process.
    """
    key = json.dumps([model, options], sort_keys=True, default=str)
    with _lock:
        engine = _engines.get(key)
        if engine is None:
            engine = _engines[key] = Engine(model, **options)
        return engine
