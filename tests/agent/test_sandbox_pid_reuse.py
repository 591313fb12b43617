"""The caller stops a worker by process group (its children too) and reads its CPU time by pid;
once the worker is gone (killed by the kernel at its session's CPU limit while idle), its pid
may be reused -- by an unrelated process that leads its own group, e.g. one started with
``start_new_session=True`` -- and the caller signalled or measured that process instead."""

from __future__ import annotations

import socket
import subprocess
import tempfile

import pytest

from agentrt.agent.forkserver import ProcessWorker
from agentrt.agent.wire import Channel
from agentrt.agent.worker import REPLIES


@pytest.fixture()
def stranger():
    """An unrelated process of the user's that leads its own process group."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def test_a_dead_workers_reused_pid_is_neither_signalled_nor_measured(stranger):
    gone = subprocess.Popen(["true"], start_new_session=True)
    ours, _theirs = socket.socketpair()
    worker = ProcessWorker(Channel(ours, REPLIES), gone.pid, tempfile.TemporaryFile())
    gone.wait()
    worker.pid = stranger.pid  # what pid reuse looks like from the caller
    assert worker.cpu_seconds() is None
    worker.close(grace_s=0)
    assert stranger.poll() is None, "an unrelated process group was killed"
    _theirs.close()


def test_a_live_workers_group_is_still_killed():
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    ours, _theirs = socket.socketpair()
    worker = ProcessWorker(Channel(ours, REPLIES), proc.pid, tempfile.TemporaryFile())
    assert worker.cpu_seconds() is not None
    worker.kill()
    assert proc.wait(timeout=30) == -9
    worker.close(grace_s=0)
    _theirs.close()
