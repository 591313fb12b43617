"""The data-only wire between a tool worker and its caller: length-prefixed JSON frames.

A worker runs model-written code, so everything it sends is hostile input to the caller. The wire
is built so that nothing a worker sends can run code, block, or grow memory in the caller:

- a frame is a 4-byte big-endian length and that many bytes of UTF-8 JSON, at most
  :data:`MAX_FRAME_BYTES`; a larger header is a protocol error at once;
- frames decode with :func:`json.loads` (no ``NaN``/``Infinity``), then into one of the message
  dataclasses the reader *expects* (:func:`decode`): every field checked against its annotation,
  no field missing or extra — anything else is a :class:`WireError`;
- the socket is non-blocking: :meth:`Channel.poll` buffers whatever bytes are there and never
  waits past its timeout, so a peer that withholds the rest of a frame cannot hold the caller;
  :meth:`Channel.send` takes a deadline for a peer that stops reading.

The caller kills a worker on any :class:`WireError` and turns it into an error observation.
"""

from __future__ import annotations

import dataclasses
import json
import math
import select
import socket
import struct
import time
import types
import typing
from typing import Any, Literal, Union

__all__ = ["MAX_FRAME_BYTES", "Channel", "WireError", "WireTimeout", "decode", "encode"]

#: largest frame either side accepts (header excluded)
MAX_FRAME_BYTES = 16 * 2**20
_HEADER = struct.Struct(">I")
_READ_CHUNK = 2**16


class WireError(Exception):
    """The peer broke the protocol: oversized frame, undecodable bytes or an unexpected message."""


class WireTimeout(WireError):
    """A deadline passed before a whole frame could be read or written."""


def encode(msg: Any) -> bytes:
    """One frame for message ``msg`` (a dataclass with a ``tag`` class attribute):
    ``{"type": tag, **fields}`` as JSON, length-prefixed.

    Raises :class:`WireError` for a message over the frame limit or nested too deeply, and
    ``TypeError`` / ``ValueError`` for values that are not JSON.
    """
    tag = msg.tag
    body = {"type": tag, **{f.name: getattr(msg, f.name) for f in dataclasses.fields(msg)}}
    try:
        payload = json.dumps(body, default=_plain, allow_nan=False).encode()
    except RecursionError:
        raise WireError(f"a {tag!r} message is nested too deeply to encode") from None
    if len(payload) > MAX_FRAME_BYTES:
        raise WireError(f"a {tag!r} message of {len(payload)} bytes is over the frame limit")
    return _HEADER.pack(len(payload)) + payload


def decode(payload: bytes, expected: dict[str, type]) -> Any:
    """The message in ``payload``, which must be one of ``expected`` (tag → dataclass).

    Raises :class:`WireError` for anything else; never runs code from the payload.
    """
    try:
        body = json.loads(payload.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise WireError(f"undecodable frame: {type(exc).__name__}") from None
    tag = body.get("type") if isinstance(body, dict) else None
    if not isinstance(tag, str) or tag not in expected:
        raise WireError(f"unexpected message {str(tag)[:40]!r}")
    cls = expected[body.pop("type")]
    return _build(cls, body)


class Channel:
    """One end of the wire over a connected stream socket (made non-blocking here)."""

    def __init__(self, sock: socket.socket, expected: dict[str, type]) -> None:
        self.sock = sock
        self.expected = expected
        sock.setblocking(False)
        self._buffer = bytearray()
        self._closed = False

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, msg: Any, *, deadline: float | None = None) -> None:
        """Write one frame; wait at most until ``deadline`` (``time.monotonic()``) for room.

        Raises :class:`WireTimeout` past the deadline, ``OSError`` if the peer is gone.
        """
        view = memoryview(encode(msg))
        while view:
            try:
                view = view[self.sock.send(view):]
            except BlockingIOError:
                if not _wait(self.sock, select.POLLOUT, deadline):
                    raise WireTimeout("the peer stopped reading") from None

    def poll(self, timeout: float | None = 0.0) -> bool:
        """Whether a whole frame is buffered, reading what arrives for at most ``timeout`` s.

        Raises ``EOFError`` when the peer closed, :class:`WireError` on an oversized header.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._has_frame():
            if self._closed:
                raise EOFError("the peer closed the connection")
            if not _wait(self.sock, select.POLLIN, deadline):
                return False
            self._read_available()
        return True

    def recv(self, deadline: float | None = None, expected: dict[str, type] | None = None) -> Any:
        """The next message, one of ``expected`` (default: the channel's); waits until
        ``deadline`` at most (:class:`WireTimeout`)."""
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not self.poll(timeout):
            raise WireTimeout("no complete message before the deadline")
        (size,) = _HEADER.unpack_from(self._buffer)
        payload = bytes(self._buffer[_HEADER.size:_HEADER.size + size])
        del self._buffer[:_HEADER.size + size]
        return decode(payload, self.expected if expected is None else expected)

    def close(self) -> None:
        self.sock.close()

    def _has_frame(self) -> bool:
        if len(self._buffer) < _HEADER.size:
            return False
        (size,) = _HEADER.unpack_from(self._buffer)
        if size > MAX_FRAME_BYTES:
            raise WireError(f"a frame of {size} bytes is over the {MAX_FRAME_BYTES}-byte limit")
        return len(self._buffer) >= _HEADER.size + size

    def _read_available(self) -> None:
        while len(self._buffer) <= MAX_FRAME_BYTES + _HEADER.size:
            try:
                chunk = self.sock.recv(_READ_CHUNK)
            except BlockingIOError:
                return
            if not chunk:
                self._closed = True
                return
            self._buffer += chunk
            if self._has_frame():
                return


def _wait(sock: socket.socket, event: int, deadline: float | None) -> bool:
    """Wait for ``event`` on ``sock`` until ``deadline``; True if it (or a hang-up) happened."""
    poller = select.poll()
    poller.register(sock, event)
    while True:
        remaining = None if deadline is None else deadline - time.monotonic()
        timeout_ms = None if remaining is None else max(0, math.ceil(remaining * 1000))
        if poller.poll(timeout_ms):
            return True
        if remaining is not None and remaining <= 0:
            return False


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    raise TypeError(f"{type(value).__name__} cannot cross the wire")


def _build(cls: type, body: Any) -> Any:
    """An instance of dataclass ``cls`` from JSON object ``body``, every field type-checked."""
    if not isinstance(body, dict):
        raise WireError(f"{cls.__name__}: expected an object")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    if set(body) != set(names):
        raise WireError(f"{cls.__name__}: fields {sorted(body)[:8]} != {names}")
    fields = {name: _check(body[name], hints[name], f"{cls.__name__}.{name}") for name in names}
    return cls(**fields)


def _check(value: Any, hint: Any, where: str) -> Any:
    """``value`` converted to ``hint`` (tuples from lists, nested dataclasses), or WireError."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (Union, types.UnionType):
        for option in args:
            try:
                return _check(value, option, where)
            except WireError:
                continue
        raise WireError(f"{where}: unexpected {type(value).__name__}")
    if origin is Literal:
        if value in args and type(value) in {type(a) for a in args}:
            return value
        raise WireError(f"{where}: unexpected value")
    if origin is tuple and isinstance(value, list):
        item = args[0]
        return tuple(_check(v, item, where) for v in value)
    if origin is dict and isinstance(value, dict):
        return {_check(k, args[0], where): _check(v, args[1], where) for k, v in value.items()}
    if dataclasses.is_dataclass(hint):
        return _build(hint, value)
    if hint is float and type(value) in (int, float):
        return float(value)
    if hint is type(None) and value is None:
        return None
    if isinstance(hint, type) and type(value) is hint:
        return value
    raise WireError(f"{where}: unexpected {type(value).__name__}")
