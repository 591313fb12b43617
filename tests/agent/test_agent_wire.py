"""The data-only wire: every message round-trips, anything else is a WireError, nothing blocks."""

from __future__ import annotations

import json
import random
import socket
import struct
import time

import pytest

from agentrt.agent.parsers.base import Piece
from agentrt.agent.sandbox import SandboxReport
from agentrt.agent.wire import MAX_FRAME_BYTES, Channel, WireError, WireTimeout, decode, encode
from agentrt.agent.worker import (
    REPLIES,
    REQUESTS,
    AbortMsg,
    CloseMsg,
    Fed,
    FeedMsg,
    Finished,
    FinishMsg,
    Opened,
    OpenMsg,
    StartMsg,
)

MESSAGES = [
    OpenMsg("/tmp/x", True, {"TOKEN": "v"}),
    StartMsg(3, False),
    FeedMsg(3, 0, Piece("argument", key="q", value={"a": [1, 2.5, None, True, "ü\ud800"]})),
    FeedMsg(3, 1, Piece("statement", text="print('hi')\n")),
    FinishMsg(3),
    AbortMsg(3),
    CloseMsg(),
    Opened(SandboxReport(7, True, ("confinement", "spawn"), True, ("RLIMIT_AS",), ("note",))),
    Opened(None, "could not open"),
    Fed(3, 1, 1.5, 2.0, None),
    Finished(3, "42\n", False, 1.0, 2),
]


@pytest.fixture()
def pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    yield Channel(a, REPLIES), Channel(b, REQUESTS)
    a.close()
    b.close()


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_round_trips(msg):
    expected = REQUESTS if msg.tag in REQUESTS else REPLIES
    assert decode(encode(msg)[4:], expected) == msg


def test_each_side_decodes_only_its_own_messages():
    with pytest.raises(WireError, match="unexpected message"):
        decode(encode(StartMsg(1, True))[4:], REPLIES)
    with pytest.raises(WireError, match="unexpected message"):
        decode(encode(Fed(1, 0, 0.0, 0.0))[4:], REQUESTS)


GOOD = {"type": "fed", "call_id": 1, "index": 0, "started": 0.5, "ended": 1.0, "error": None}


@pytest.mark.parametrize("change", [
    {"call_id": True},                      # a bool is not an int
    {"call_id": "1"},
    {"index": 1.0},
    {"error": 5},
    {"extra": 1},
    {"type": ["fed"]},
    {"type": "Fed"},
])
def test_wrong_shapes_are_refused(change):
    body = {**GOOD, **change}
    with pytest.raises(WireError):
        decode(json.dumps(body).encode(), REPLIES)


@pytest.mark.parametrize("payload", [
    b'{"type": "fed", "call_id": 1, "index": 0, "started": NaN, "ended": 1, "error": null}',
    b'{"type": "fed", "call_id": 1, "index": 0, "started": Infinity, "ended": 1, "error": null}',
    b'{"type": "fed", "call_id": 1, "index": 0, "started": 0}',
    b"[1, 2]",
    b"null",
    b"\x80\x04\x95",  # a pickle
    b"[" * 50000 + b"]" * 50000,
])
def test_undecodable_or_incomplete_payloads_are_refused(payload):
    with pytest.raises(WireError):
        decode(payload, REPLIES)


def test_a_frame_split_anywhere_arrives_whole(pair):
    caller, worker = pair
    data = b"".join(encode(m) for m in MESSAGES if m.tag in REPLIES)
    rng = random.Random(0)
    cuts = sorted(rng.sample(range(1, len(data)), 20))
    received = []
    for start, end in zip([0, *cuts], [*cuts, len(data)], strict=True):
        worker.sock.sendall(data[start:end])
        while caller.poll(0):
            received.append(caller.recv())
    assert received == [m for m in MESSAGES if m.tag in REPLIES]


def test_a_withheld_rest_of_frame_never_blocks(pair):
    caller, worker = pair
    worker.sock.sendall(struct.pack(">I", 4096) + b"1234567")
    started = time.monotonic()
    assert caller.poll(0.2) is False
    with pytest.raises(WireTimeout):
        caller.recv(deadline=time.monotonic() + 0.2)
    assert time.monotonic() - started < 1.0


def test_an_oversized_header_is_refused_without_reading_it(pair):
    caller, worker = pair
    worker.sock.sendall(struct.pack(">I", MAX_FRAME_BYTES + 1) + b"x" * 100)
    with pytest.raises(WireError, match="over the"):
        caller.poll(1.0)


def test_a_peer_that_stops_reading_times_out_the_sender(pair):
    caller, worker = pair
    big = Finished(1, "x" * (MAX_FRAME_BYTES // 4), False, 0.0, 0.0)
    started = time.monotonic()
    with pytest.raises(WireTimeout):
        for _ in range(16):
            worker.send(big, deadline=time.monotonic() + 0.3)
    assert time.monotonic() - started < 2.0


def test_a_closed_peer_is_end_of_file(pair):
    caller, worker = pair
    worker.send(Fed(1, 0, 0.0, 0.0))
    worker.close()
    assert caller.recv() == Fed(1, 0, 0.0, 0.0)
    with pytest.raises(EOFError):
        caller.poll(1.0)


def test_messages_over_the_frame_limit_are_not_sent():
    with pytest.raises(WireError, match="over the frame limit"):
        encode(Finished(1, "\x00" * MAX_FRAME_BYTES, False, 0.0, 0.0))


def test_non_json_values_cannot_cross():
    with pytest.raises(TypeError):
        encode(FeedMsg(1, 0, Piece("argument", key="k", value=object())))
