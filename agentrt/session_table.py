"""SessionTable: named agent sessions with a time-to-live and a bounded count.

A front end that knows which agent a call belongs to — a ``create_agent`` run, a LangGraph
``thread_id``, a LlamaIndex workflow ``Context``, the ``session_id`` of a request to
``agentrt serve`` — keeps that agent's :class:`~agentrt.session.Session` here under the
agent's key, so the agent's next call appends only what is new. Retention ends when:

* the agent finishes: its front end calls :meth:`SessionTable.close` (the KV is freed);
* the agent stays away past its time-to-live: a session whose call ended is *paused* for
  ``ttl_s`` seconds plus the expected duration of the tool it waits for (Continuum,
  arXiv 2511.02230: a paused agent's KV is worth keeping about as long as its tool runs),
  then closed by :meth:`SessionTable.sweep` (run on every access, and by a daemon thread
  while the table holds sessions);
* the table is full: opening one more closes the least recently used idle session.

While a session is paused, the engine's own policy still decides, under memory pressure,
whether its KV is kept, swapped to host memory or recomputed (least waste, LAMPS ranking).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentrt.backends.call import as_backend
from agentrt.session import Session, SessionStats

__all__ = ["SessionTable"]


@dataclass
class _Entry:
    session: Session
    expires_at: float


class SessionTable:
    """Sessions by key (``thread_id``, run id, ``session_id``), each closed when its agent
    finishes (:meth:`close`), after its time-to-live, or when ``max_sessions`` are open and
    a new one is needed (the least recently used idle one)."""

    def __init__(self, *, ttl_s: float = 60.0, max_sessions: int = 256,
                 clock: Callable[[], float] = time.monotonic,
                 sweep_interval_s: float | None = 1.0) -> None:
        if not ttl_s > 0:
            raise ValueError(f"ttl_s must be > 0 seconds, got {ttl_s!r}")
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {max_sessions!r}")
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self.clock = clock
        self.sweep_interval_s = sweep_interval_s
        """How often a daemon thread sweeps while sessions are open (None: only on access)."""
        self.num_expired = 0
        """Sessions closed because their time-to-live ran out."""
        self.num_evicted = 0
        """Sessions closed to make room for a new one (``max_sessions``)."""
        self.closed_stats = SessionStats()
        """The counters of every session this table has closed."""
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._sweeper: threading.Thread | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def keys(self) -> list[str]:
        """The open sessions' keys, least recently used first."""
        return list(self._entries)

    def get(self, key: str, backend: Any) -> Session:
        """The session of ``key`` on ``backend`` (an engine or a backend), opened if there is
        none; its time-to-live restarts. A ``ValueError`` if ``key``'s session runs on
        another backend."""
        self.sweep()
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self._make_room()
                entry = _Entry(Session(backend), 0.0)
                self._entries[key] = entry
                self._start_sweeper()
            elif entry.session.backend != as_backend(backend):
                raise ValueError(f"session {key!r} runs on another backend")
            self._entries.move_to_end(key)
            entry.expires_at = self.clock() + self.ttl_s
            return entry.session

    def find(self, key: str) -> Session | None:
        """The open session of ``key``, if any (nothing is opened or touched)."""
        entry = self._entries.get(key)
        return None if entry is None else entry.session

    def pause(self, key: str, kind: str | None = None,
              expected_duration: float | None = None) -> None:
        """``key``'s agent now waits (for a tool of ``kind`` taking about
        ``expected_duration`` seconds): its session lives ``ttl_s`` plus that long, and the
        backend is told what it waits for (the interception policy sizes its choice by it)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return
            entry.expires_at = self.clock() + self.ttl_s + (expected_duration or 0.0)
            session = entry.session
        if kind is not None and session.session_id is not None and not session.busy:
            session.backend.set_interception(session.session_id, kind, expected_duration)

    def close(self, key: str) -> SessionStats | None:
        """``key``'s agent has finished: free its KV; its session's counters (None if it
        had no session)."""
        with self._lock:
            entry = self._entries.pop(key, None)
        if entry is None:
            return None
        return self._close(entry)

    def sweep(self) -> list[str]:
        """Close the idle sessions whose time-to-live has run out; their keys."""
        now = self.clock()
        with self._lock:
            expired = [k for k, e in self._entries.items()
                       if e.expires_at <= now and not e.session.busy]
            entries = [self._entries.pop(k) for k in expired]
        for entry in entries:
            self._close(entry)
        self.num_expired += len(entries)
        return expired

    def close_all(self) -> None:
        """Close every session (the table can be used again)."""
        with self._lock:
            entries, self._entries = list(self._entries.values()), OrderedDict()
        for entry in entries:
            self._close(entry)
        self._wake.set()

    # --- internals -----------------------------------------------------------------------------
    def _close(self, entry: _Entry) -> SessionStats:
        entry.session.close()
        self.closed_stats.add(entry.session.stats)
        return entry.session.stats

    def _make_room(self) -> None:
        while len(self._entries) >= self.max_sessions:
            idle = next((k for k, e in self._entries.items() if not e.session.busy), None)
            if idle is None:
                raise RuntimeError(f"all {self.max_sessions} sessions are serving calls; "
                                   "raise max_sessions or close finished agents' sessions")
            self._close(self._entries.pop(idle))
            self.num_evicted += 1

    def _start_sweeper(self) -> None:
        if self.sweep_interval_s is None or (self._sweeper and self._sweeper.is_alive()):
            return
        self._wake.clear()
        self._sweeper = threading.Thread(target=self._sweep_loop, name="agentrt-session-ttl",
                                         daemon=True)
        self._sweeper.start()

    def _sweep_loop(self) -> None:
        interval = self.sweep_interval_s or 1.0
        while self._entries and not self._wake.wait(interval):
            try:
                self.sweep()
            except Exception:  # noqa: BLE001 - a backend gone away must not kill the thread
                pass
