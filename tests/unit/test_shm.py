"""Unit tests of harness.executors.mp.shm: the one-writer, N-reader shared-memory ring."""

from __future__ import annotations

import os
import random
import re
import threading
import time
import types
from collections.abc import Callable, Iterator

import pytest

from harness.executors.mp import shm
from harness.executors.mp.shm import NAME_PREFIX, RingHandle, RingReader, RingWriter


class RingFullError(RuntimeError):
    """What a test's ``wait_for_space`` policy raises when it gives up (the
    executor's own policy raises the contract's errors: a reader's process died)."""


SHM_DIR = "/dev/shm"


def _segment_path(name: str) -> str:
    return os.path.join(SHM_DIR, name)


def _payload(i: int, size: int) -> bytes:
    """Deterministic, index-dependent bytes: a misplaced chunk cannot go unnoticed."""
    return random.Random(i).randbytes(size)


class Rings:
    """Makes writers and readers and closes them all (readers first) after the test."""

    def __init__(self) -> None:
        self.writers: list[RingWriter] = []
        self.readers: list[RingReader] = []

    def writer(self, n_readers: int, n_slots: int = 4, slot_size: int = 64) -> RingWriter:
        w = RingWriter(n_readers, n_slots=n_slots, slot_size=slot_size)
        self.writers.append(w)
        return w

    def attach_writer(self, handle: RingHandle) -> RingWriter:
        w = RingWriter.attach(handle)
        self.writers.insert(0, w)  # closed before the owner
        return w

    def reader(self, handle: RingHandle, index: int) -> RingReader:
        r = RingReader(handle, index)
        self.readers.append(r)
        return r

    def readers_of(self, w: RingWriter) -> list[RingReader]:
        return [self.reader(w.handle, i) for i in range(w.handle.n_readers)]

    def close(self) -> None:
        for r in self.readers:
            r.close()
        for w in self.writers:
            w.close()


@pytest.fixture
def rings() -> Iterator[Rings]:
    made = Rings()
    try:
        yield made
    finally:
        made.close()


def _no_wait() -> None:
    raise AssertionError("the ring was full, but this test never fills it")


def _draining(readers: list[RingReader], got: list[list[bytes]], limit: int = 1_000_000) -> Callable[[], None]:
    """A wait_for_space that lets every reader poll (as the workers would), appending
    the messages they complete to ``got``; fails instead of spinning for ever."""
    calls = 0

    def wait_for_space() -> None:
        nonlocal calls
        calls += 1
        if calls > limit:
            raise AssertionError(f"wait_for_space called {calls} times: the ring makes no progress")
        for r, out in zip(readers, got, strict=True):
            msg = r.poll()
            if msg is not None:
                out.append(msg)

    return wait_for_space


def _drain(reader: RingReader, out: list[bytes]) -> None:
    while (msg := reader.poll()) is not None:
        out.append(msg)


# --------------------------------------------------------------------------- wrap-around


def test_wrap_around_many_more_messages_than_slots(rings: Rings) -> None:
    w = rings.writer(n_readers=3, n_slots=4, slot_size=64)
    readers = rings.readers_of(w)
    got: list[list[bytes]] = [[] for _ in readers]
    sent = [_payload(i, i % 65) for i in range(1000)]  # 0..64 bytes: one chunk each, empty included
    wait = _draining(readers, got)
    for msg in sent:
        w.write(msg, wait)
    for r, out in zip(readers, got, strict=True):
        _drain(r, out)
    assert w.chunks_written == len(sent)
    assert w.consumed() == [len(sent)] * 3
    for out in got:
        assert out == sent
    for r in readers:
        assert r.poll() is None


def test_reader_in_lockstep_reads_every_message_without_waits(rings: Rings) -> None:
    w = rings.writer(n_readers=1, n_slots=2, slot_size=64)
    (r,) = rings.readers_of(w)
    for i in range(300):
        msg = _payload(i, 64)
        w.write(msg, _no_wait)
        assert r.poll() == msg
        assert r.poll() is None


def test_many_readers_each_read_every_message_in_order(rings: Rings) -> None:
    n = 8
    w = rings.writer(n_readers=n, n_slots=8, slot_size=128)
    readers = rings.readers_of(w)
    got: list[list[bytes]] = [[] for _ in readers]
    sent = [f"message {i}".encode() * (1 + i % 5) for i in range(200)]  # some span two slots
    step = 0

    def wait_for_space() -> None:
        # Readers at different speeds: reader k polls only on every (k+1)-th call.
        nonlocal step
        step += 1
        if step > 100_000:
            raise AssertionError("no progress")
        for k, (r, out) in enumerate(zip(readers, got, strict=True)):
            if step % (k + 1) == 0 and (msg := r.poll()) is not None:
                out.append(msg)

    for msg in sent:
        w.write(msg, wait_for_space)
    for r, out in zip(readers, got, strict=True):
        _drain(r, out)
    for out in got:
        assert out == sent


def test_notify_is_called_once_per_chunk(rings: Rings) -> None:
    w = rings.writer(n_readers=1, n_slots=8, slot_size=64)
    (r,) = rings.readers_of(w)
    notified: list[int] = []
    w.write(b"x" * (64 * 3 + 1), _no_wait, notify=lambda: notified.append(w.chunks_written))
    assert notified == [1, 2, 3, 4]  # after each chunk is published
    assert r.poll() == b"x" * (64 * 3 + 1)


def test_concurrent_reader_thread(rings: Rings) -> None:
    w = rings.writer(n_readers=2, n_slots=4, slot_size=64)
    r0, r1 = rings.readers_of(w)
    sent = [_payload(i, (i * 37) % 300) for i in range(300)]  # up to 5 chunks each
    got: list[bytes] = []
    errors: list[BaseException] = []
    deadline = time.monotonic() + 5

    def read() -> None:
        try:
            while len(got) < len(sent) and time.monotonic() < deadline:
                msg = r1.poll()
                if msg is None:
                    time.sleep(0.0001)
                else:
                    got.append(msg)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    own: list[bytes] = []

    def wait_for_space() -> None:
        if time.monotonic() > deadline:
            raise RingFullError(f"readers {w.lagging_readers()} stopped")
        _drain(r0, own)
        time.sleep(0.0001)

    try:
        for msg in sent:
            w.write(msg, wait_for_space)
    finally:
        thread.join(timeout=5)
    assert not thread.is_alive()
    assert not errors
    _drain(r0, own)
    assert got == sent
    assert own == sent


# --------------------------------------------------------------------------- overflow


@pytest.mark.parametrize(
    ("slot_size", "size"),
    [
        (64, 0),
        (64, 1),
        (64, 63),
        (64, 64),  # exactly one slot: no empty trailing chunk
        (64, 65),  # one byte over
        (64, 64 * 4),  # exactly the whole ring
        (64, 64 * 4 + 1),  # more than the whole ring
        (4096, 4096),
        (4096, 4097),
        (4096, 3 * 1024 * 1024 + 17),  # several MiB through a 16 KiB ring
    ],
)
def test_overflow_message_sizes(rings: Rings, slot_size: int, size: int) -> None:
    w = rings.writer(n_readers=3, n_slots=4, slot_size=slot_size)
    readers = rings.readers_of(w)
    got: list[list[bytes]] = [[] for _ in readers]
    wait = _draining(readers, got)
    sent = [_payload(size, size), b"after", _payload(size + 1, size)]
    for msg in sent:
        w.write(msg, wait)
    for r, out in zip(readers, got, strict=True):
        _drain(r, out)
    expected_chunks = sum(max(1, -(-len(m) // slot_size)) for m in sent)
    assert w.chunks_written == expected_chunks
    for out in got:
        assert len(out) == len(sent)
        assert out == sent


@pytest.mark.parametrize(
    ("prefix_size", "size"),
    [
        (8, 0),  # the prefix alone
        (8, 56),  # prefix and data fill one slot exactly
        (8, 57),  # one byte spills into a second chunk
        (8, 64 * 5),  # data across several chunks, the ring wrapping
        (64, 1),  # the prefix fills the first slot; the data starts the second
        (100, 30),  # the prefix itself spans two chunks
    ],
)
def test_a_prefix_is_read_as_the_front_of_the_message(rings: Rings, prefix_size: int, size: int) -> None:
    w = rings.writer(n_readers=2, n_slots=4, slot_size=64)
    readers = rings.readers_of(w)
    got: list[list[bytes]] = [[] for _ in readers]
    wait = _draining(readers, got)
    prefix, data = _payload(1, prefix_size), _payload(2, size)
    w.write(data, wait, prefix=prefix)
    w.write(b"after", wait)
    for r, out in zip(readers, got, strict=True):
        _drain(r, out)
    assert got == [[prefix + data, b"after"]] * 2
    assert w.chunks_written == max(1, -(-(prefix_size + size) // 64)) + 1


def test_overflow_several_mib_with_tiny_slots(rings: Rings) -> None:
    size = 2 * 1024 * 1024 + 3
    w = rings.writer(n_readers=2, n_slots=8, slot_size=512)
    readers = rings.readers_of(w)
    got: list[list[bytes]] = [[] for _ in readers]
    msg = _payload(7, size)
    w.write(memoryview(msg), _draining(readers, got))
    for r, out in zip(readers, got, strict=True):
        _drain(r, out)
    assert got == [[msg], [msg]]


def test_overflow_readers_interleaved_with_the_writer(rings: Rings) -> None:
    """Readers poll one at a time, one chunk ahead of another, mid-message: each
    reassembles its own copy and sees whole messages only."""
    w = rings.writer(n_readers=3, n_slots=3, slot_size=64)
    readers = rings.readers_of(w)
    got: list[list[bytes]] = [[] for _ in readers]
    turn = 0

    def wait_for_space() -> None:
        nonlocal turn
        turn += 1
        if turn > 1_000_000:
            raise AssertionError("no progress")
        k = turn % len(readers)
        msg = readers[k].poll()
        if msg is not None:
            got[k].append(msg)

    sent = [_payload(i, size) for i, size in enumerate([64, 65, 1000, 0, 191, 192, 193, 64 * 3, 5000])]
    for msg in sent:
        w.write(msg, wait_for_space)
    for r, out in zip(readers, got, strict=True):
        _drain(r, out)
    for out in got:
        assert out == sent


def test_poll_returns_none_for_a_partly_written_message(rings: Rings) -> None:
    w = rings.writer(n_readers=1, n_slots=2, slot_size=64)
    (r,) = rings.readers_of(w)
    assert r.poll() is None
    polled: list[bytes | None] = []

    def wait_for_space() -> None:
        polled.append(r.poll())

    w.write(b"a" * 64 * 3, wait_for_space)  # chunk 3 waits for the reader
    assert polled == [None]  # two chunks consumed, the message is not whole yet
    assert r.poll() == b"a" * 64 * 3


# --------------------------------------------------------------------------- a reader that stops


class _Stuck(RingFullError):
    """What this test's policy raises for a reader that stopped."""


@pytest.mark.parametrize("how", ["stops_reading", "closed"])
def test_a_stopped_reader_aborts_the_write_through_wait_for_space(rings: Rings, how: str) -> None:
    w = rings.writer(n_readers=3, n_slots=4, slot_size=64)
    readers = rings.readers_of(w)
    if how == "closed":
        readers[1].close()  # as if its process died: its counter never moves again
    live = [readers[0], readers[2]]
    calls = 0
    lagging_seen: list[list[int]] = []

    def wait_for_space() -> None:
        nonlocal calls
        calls += 1
        lagging_seen.append(w.lagging_readers())
        for r in live:
            _drain(r, [])
        if calls >= 3:  # the policy gives up (the real one checks the reader's process)
            raise _Stuck(f"readers {w.lagging_readers()} do not read")
        if calls > 100:
            raise AssertionError("wait_for_space was not stopped by its own exception")

    for i in range(4):  # fills the ring: no wait needed yet
        w.write(bytes([i]) * 10, _no_wait)
    for r in live:
        _drain(r, [])
    assert w.lagging_readers() == [1]
    with pytest.raises(_Stuck, match=r"readers \[1\]") as info:
        w.write(b"x" * 10, wait_for_space)
    assert info.value.args
    assert calls == 3
    assert lagging_seen == [[1], [1], [1]]
    assert w.lagging_readers() == [1]
    assert not w.has_space()
    assert w.chunks_written == 4  # nothing of the aborted message was published
    assert w.consumed() == [4, 0, 4]


def test_an_abort_mid_message_leaves_published_chunks_counted(rings: Rings) -> None:
    w = rings.writer(n_readers=2, n_slots=2, slot_size=64)
    r0, _r1 = rings.readers_of(w)

    def give_up() -> None:
        _drain(r0, [])
        raise _Stuck(str(w.lagging_readers()))

    with pytest.raises(_Stuck, match=r"\[1\]"):
        w.write(b"y" * 64 * 5, give_up)
    assert w.chunks_written == 2
    assert w.lagging_readers() == [1]


def test_an_exception_from_notify_aborts_the_write(rings: Rings) -> None:
    w = rings.writer(n_readers=1, n_slots=4, slot_size=64)
    rings.readers_of(w)

    def notify() -> None:
        raise OSError("wake-up pipe closed")

    with pytest.raises(OSError, match="wake-up pipe closed"):
        w.write(b"z" * 200, _no_wait, notify)
    assert w.chunks_written == 1


def test_lagging_readers_is_empty_while_there_is_space(rings: Rings) -> None:
    w = rings.writer(n_readers=2, n_slots=4, slot_size=64)
    rings.readers_of(w)
    for i in range(3):
        w.write(bytes([i]), _no_wait)
        assert w.lagging_readers() == []
        assert w.has_space()
    w.write(b"3", _no_wait)
    assert w.lagging_readers() == [0, 1]


def test_the_writer_sees_each_readers_asleep_flag_and_only_its_own(rings: Rings) -> None:
    w = rings.writer(n_readers=3)
    _r0, r1, r2 = rings.readers_of(w)
    assert [w.reader_asleep(r) for r in range(3)] == [False, False, False]
    r1.set_asleep(True)
    assert [w.reader_asleep(r) for r in range(3)] == [False, True, False]
    # The flag shares the reader's line with its counter: reading moves one, not the other.
    w.write(b"m", _no_wait)
    assert r1.poll() == b"m"
    assert [w.reader_asleep(r) for r in range(3)] == [False, True, False]
    assert w.consumed() == [0, 1, 0]
    r1.set_asleep(False)
    r2.set_asleep(True)
    assert [w.reader_asleep(r) for r in range(3)] == [False, False, True]
    # A writer attached in another process sees the same flags.
    assert rings.attach_writer(w.handle).reader_asleep(2)


def test_a_closed_reader_cannot_raise_its_flag(rings: Rings) -> None:
    w = rings.writer(n_readers=1)
    (r,) = rings.readers_of(w)
    r.close()
    with pytest.raises(ValueError, match=w.handle.name):
        r.set_asleep(True)


# --------------------------------------------------------------------------- segment life


def test_segment_is_private_to_the_user(rings: Rings) -> None:
    old = os.umask(0)  # a permissive umask must not widen the mode
    try:
        w = rings.writer(n_readers=1)
    finally:
        os.umask(old)
    assert w.handle.name.startswith(NAME_PREFIX)
    st = os.stat(_segment_path(w.handle.name))
    assert st.st_mode & 0o777 == 0o600
    assert st.st_uid == os.getuid()
    assert st.st_size >= w.handle.nbytes


def test_close_unlinks_and_is_idempotent() -> None:
    w = RingWriter(1, n_slots=2, slot_size=64)
    path = _segment_path(w.handle.name)
    assert os.path.exists(path)
    w.close()
    assert not os.path.exists(path)
    w.close()  # idempotent
    assert not os.path.exists(path)
    with pytest.raises(ValueError, match="closed"):
        w.write(b"x", _no_wait)
    with pytest.raises(ValueError, match="closed"):
        w.consumed()


def test_attached_writer_writes_and_its_close_does_not_unlink(rings: Rings) -> None:
    owner = rings.writer(n_readers=2, n_slots=2, slot_size=64)
    path = _segment_path(owner.handle.name)
    readers = rings.readers_of(owner)
    attached = rings.attach_writer(owner.handle)
    assert attached.handle == owner.handle
    got: list[list[bytes]] = [[], []]
    sent = [_payload(i, 100) for i in range(20)]
    for msg in sent:
        attached.write(msg, _draining(readers, got))
    for r, out in zip(readers, got, strict=True):
        _drain(r, out)
    assert got == [sent, sent]
    attached.close()
    assert os.path.exists(path)
    attached.close()  # idempotent
    assert os.path.exists(path)
    with pytest.raises(ValueError, match="closed"):
        attached.write(b"x", _no_wait)
    owner.close()
    assert not os.path.exists(path)


def test_reader_close_does_not_unlink_and_is_idempotent(rings: Rings) -> None:
    w = rings.writer(n_readers=1)
    r = RingReader(w.handle, 0)
    r.close()
    r.close()
    assert os.path.exists(_segment_path(w.handle.name))
    with pytest.raises(ValueError, match="closed"):
        r.poll()


def test_handle_is_picklable_and_reader_attaches_by_it(rings: Rings) -> None:
    import pickle

    w = rings.writer(n_readers=2, n_slots=3, slot_size=128)
    handle = pickle.loads(pickle.dumps(w.handle))
    assert handle == w.handle
    w.write(b"hello", _no_wait)
    assert rings.reader(handle, 1).poll() == b"hello"


def test_reader_attached_late_starts_from_its_counter(rings: Rings) -> None:
    w = rings.writer(n_readers=1, n_slots=4, slot_size=64)
    first = rings.reader(w.handle, 0)
    w.write(b"one", _no_wait)
    assert first.poll() == b"one"
    first.close()
    w.write(b"two", _no_wait)
    again = rings.reader(w.handle, 0)  # a reader re-attaching resumes where the index left off
    assert again.poll() == b"two"


# --------------------------------------------------------------------------- bad arguments


@pytest.mark.parametrize(
    ("kwargs", "field", "value"),
    [
        ({"n_readers": 0}, "n_readers", "0"),
        ({"n_readers": -1}, "n_readers", "-1"),
        ({"n_readers": 1, "n_slots": 1}, "n_slots", "1"),
        ({"n_readers": 1, "n_slots": 0}, "n_slots", "0"),
        ({"n_readers": 1, "slot_size": 0}, "slot_size", "0"),
        ({"n_readers": 1, "slot_size": 56}, "slot_size", "56"),
        ({"n_readers": 1, "slot_size": 63}, "slot_size", "63"),
        ({"n_readers": 1, "slot_size": 100}, "slot_size", "100"),
        ({"n_readers": 1, "slot_size": -64}, "slot_size", "-64"),
    ],
)
def test_invalid_writer_args_raise_value_error_naming_the_value(
    monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, int], field: str, value: str
) -> None:
    def no_segment(_n: int) -> str:
        raise AssertionError("the arguments were checked after naming a segment")

    monkeypatch.setattr(shm, "secrets", types.SimpleNamespace(token_hex=no_segment))
    with pytest.raises(ValueError, match=rf"{field}\b.*\bgot {value}$"):
        RingWriter(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"n_readers": 1, "slot_size": 64.0}, "slot_size"),
        ({"n_readers": 1, "n_slots": 2.5}, "n_slots"),
        ({"n_readers": 1.5}, "n_readers"),
    ],
)
def test_float_writer_args_raise_value_error_and_leave_no_segment(
    monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, float], field: str
) -> None:
    token = f"unit{os.getpid():x}{threading.get_ident() % 10**6:x}"
    monkeypatch.setattr(shm, "secrets", types.SimpleNamespace(token_hex=lambda _n: token))
    path = _segment_path(NAME_PREFIX + token)
    try:
        with pytest.raises(ValueError, match=rf"{field}.*got {re.escape(repr(kwargs[field]))}$"):
            RingWriter(**kwargs)  # type: ignore[arg-type]
        assert not os.path.exists(path), "the failed constructor left its segment behind"
    finally:
        if os.path.exists(path):
            os.unlink(path)  # clean up what the bug leaked


@pytest.mark.parametrize("index", [-1, 2, 3, 100])
def test_reader_with_bad_index_raises(rings: Rings, index: int) -> None:
    w = rings.writer(n_readers=2)
    with pytest.raises(ValueError, match=rf"index must be in \[0, 2\), got {index}$"):
        RingReader(w.handle, index)


def test_reader_of_a_mismatched_handle_raises(rings: Rings) -> None:
    w = rings.writer(n_readers=2, n_slots=4, slot_size=64)
    wrong = RingHandle(w.handle.name, 2, 2, 64)
    with pytest.raises(ValueError, match="is not a ring matching"):
        RingReader(wrong, 0)


def test_reader_of_a_missing_segment_raises() -> None:
    w = RingWriter(1, n_slots=2, slot_size=64)
    w.close()
    with pytest.raises(FileNotFoundError):
        RingReader(w.handle, 0)
