"""The repeat guard: an agent that makes the identical tool call again and again is stopped.

A small model forced into a tool call may issue the same call forever (the 135M model
repeated one call 121 times over 605 s under ``create_agent``, whose recursion limit is
about 10,000). :func:`repeated_call` finds the run of identical calls at the end of an agent's
history; the ``create_agent`` middleware and ``agentrt.Executor`` stop the agent with
:func:`repeat_message` once the same call has been made ``max_repeats`` times in a row.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

__all__ = ["DEFAULT_MAX_REPEATS", "repeat_message", "repeated_call"]

DEFAULT_MAX_REPEATS = 3
"""Identical tool calls in a row that stop an agent (None or 0 turns the guard off)."""


def _key(name: str, args: Any) -> str:
    return name + "\0" + json.dumps(args, sort_keys=True, default=str)


def repeated_call(steps: Sequence[Sequence[tuple[str, Any]]],
                  max_repeats: int | None) -> tuple[str, Any] | None:
    """The call ``(name, args)`` that the last ``max_repeats`` steps each made alone and
    identically (a step: the calls of one model turn), or None."""
    if not max_repeats or len(steps) < max_repeats:
        return None
    last = steps[-max_repeats:]
    if any(len(step) != 1 for step in last):
        return None
    keys = {_key(*step[0]) for step in last}
    return last[-1][0] if len(keys) == 1 else None


def repeat_message(call: tuple[str, Any], max_repeats: int) -> str:
    """What the agent answers when the guard stops it."""
    name, args = call
    return (f"Stopped: the agent called {name}({json.dumps(args, default=str)}) "
            f"{max_repeats} times in a row with the same arguments and would repeat it; "
            f"its last result is above (raise max_repeats, or None to turn the guard off).")
