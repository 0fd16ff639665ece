"""The ``ray`` executor's channels to a rank on another node: a socket, here on loopback."""

from __future__ import annotations

import select
import time
from collections.abc import Iterator

import pytest

from harness.executors.futures import Reply
from harness.executors.mp.worker import encode_reply
from harness.executors.ray.channels import _LENGTH, CallerChannels, RankChannel


@pytest.fixture
def remote_rank() -> Iterator[tuple[CallerChannels, RankChannel]]:
    """The caller's channels with rank 0 remote, and that rank's end, attached."""
    channels = CallerChannels([False], "127.0.0.1")
    rank = RankChannel(0, channels.plan(0), timeout_s=5.0)
    channels.attached(time.monotonic() + 5.0)
    yield channels, rank
    assert rank.sock is not None
    rank.sock.close()
    channels.close()


def _send(rank: RankChannel, reply: Reply) -> None:
    raw = encode_reply(reply)
    assert rank.sock is not None
    rank.sock.sendall(_LENGTH.pack(len(raw)) + raw)


def test_a_look_that_does_not_wait_collects_a_reply_already_on_a_remote_ranks_socket(
    remote_rank: tuple[CallerChannels, RankChannel],
) -> None:
    """C4: ``future.done()`` alone sees a completed call; it drives the queue
    with a timeout of 0, which must read the sockets, not only the inboxes."""
    channels, rank = remote_rank
    _send(rank, Reply(0, 7, "done"))
    readable, _, _ = select.select([channels.sockets[0]], [], [], 5.0)
    assert readable, "the reply never reached the caller's socket"
    replies, dead, stopped = channels.collect(0)
    assert (replies, dead, stopped) == ([Reply(0, 7, "done")], [], False)


def test_a_look_that_does_not_wait_sees_a_remote_rank_whose_connection_closed(
    remote_rank: tuple[CallerChannels, RankChannel],
) -> None:
    channels, rank = remote_rank
    assert rank.sock is not None
    rank.sock.close()
    readable, _, _ = select.select([channels.sockets[0]], [], [], 5.0)
    assert readable
    assert channels.collect(0) == ([], [0], False)
