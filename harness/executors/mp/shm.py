"""A shared-memory ring buffer: one writer broadcasts, N readers each read every message.

The reference executor writes each request once, whatever the world size, and
every worker reads it. Layout of the segment (all fields little-endian u64)::

    [header: magic, n_readers, n_slots, slot_size]          64 bytes
    [reader r: chunks consumed, asleep]                     64 bytes each
    [slot k: seq, length, more | data (slot_size bytes)]    n_slots of these

A message larger than a slot is split into consecutive chunks (``more`` = 1 on
all but the last); readers reassemble it. A chunk is published by writing its
``seq`` (chunk number + 1) after its data; a slot is reused only once every
reader's counter has passed its previous chunk. The ring never blocks on its
own: ``write`` calls ``wait_for_space`` while it is full, and that callback
decides how to wait and when to give up (say, when a reader died). Waking
readers is the caller's business too (``notify``), so this module has no
threads, no sockets, and no timing policy. It only keeps, per reader, a flag
the reader raises while it sleeps (``set_asleep``), which the writer reads
(``reader_asleep``), so that a writer wakes only a reader that may need it.
"""

from __future__ import annotations

import secrets
import struct
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import shared_memory

__all__ = ["RingHandle", "RingReader", "RingWriter"]

_MAGIC = 0x48524E5352494E47  # "HRNSRING"
_U64 = struct.Struct("<Q")
_SLOT_HDR = struct.Struct("<QQQ")
_LENGTH_MORE = struct.Struct("<QQ")
_HEADER = 64
_COUNTER_STRIDE = 64  # one cache line per reader: no false sharing between workers
_SLOT_HDR_SIZE = 64

#: Prefix of every segment this module creates (leak checks may look for it).
NAME_PREFIX = "harness_ring_"


def buffer_of(shm: shared_memory.SharedMemory) -> memoryview:
    """The mapped buffer of an open segment (typed: never None)."""
    buf = shm.buf
    if buf is None:  # only after close(), which this module never reads past
        raise ValueError(f"shared memory {shm.name} is closed")
    return buf


@dataclass(frozen=True)
class RingHandle:
    """What a reader needs to attach: picklable, sent to the worker processes."""

    name: str
    n_readers: int
    n_slots: int
    slot_size: int

    @property
    def nbytes(self) -> int:
        return _HEADER + self.n_readers * _COUNTER_STRIDE + self.n_slots * (_SLOT_HDR_SIZE + self.slot_size)

    def counter_offset(self, reader: int) -> int:
        return _HEADER + reader * _COUNTER_STRIDE

    def asleep_offset(self, reader: int) -> int:
        return self.counter_offset(reader) + 8

    def slot_offset(self, slot: int) -> int:
        return _HEADER + self.n_readers * _COUNTER_STRIDE + slot * (_SLOT_HDR_SIZE + self.slot_size)


class RingWriter:
    """The single writer. Creates the segment and unlinks it on ``close``; or, made
    with ``attach``, writes into a segment another process created and owns."""

    @classmethod
    def attach(cls, handle: RingHandle) -> RingWriter:
        self = cls.__new__(cls)
        self.handle = handle
        shm = self._shm = shared_memory.SharedMemory(name=handle.name, create=False)
        self._owner = False
        self._unlinked = False
        self._init_cursor(shm)
        return self

    def __init__(self, n_readers: int, n_slots: int = 32, slot_size: int = 128 * 1024) -> None:
        for arg, value in (("n_readers", n_readers), ("n_slots", n_slots), ("slot_size", slot_size)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"RingWriter: {arg} must be an int, got {value!r}")
        if n_readers < 1:
            raise ValueError(f"RingWriter: n_readers must be >= 1, got {n_readers}")
        if n_slots < 2:
            raise ValueError(f"RingWriter: n_slots must be >= 2, got {n_slots}")
        if slot_size < 64 or slot_size % 8:
            raise ValueError(f"RingWriter: slot_size must be a multiple of 8 >= 64, got {slot_size}")
        name = NAME_PREFIX + secrets.token_hex(8)
        self.handle = RingHandle(name, n_readers, n_slots, slot_size)
        # SharedMemory creates the segment with mode 0600: private to the user (C23).
        shm = shared_memory.SharedMemory(name=name, create=True, size=self.handle.nbytes)
        self._shm: shared_memory.SharedMemory | None = shm
        buf = buffer_of(shm)
        struct.pack_into("<QQQQ", buf, 0, _MAGIC, n_readers, n_slots, slot_size)
        for r in range(n_readers):
            _U64.pack_into(buf, self.handle.counter_offset(r), 0)
            _U64.pack_into(buf, self.handle.asleep_offset(r), 0)
        for k in range(n_slots):
            _SLOT_HDR.pack_into(buf, self.handle.slot_offset(k), 0, 0, 0)
        self._owner = True
        self._unlinked = False
        self._init_cursor(shm)

    def _init_cursor(self, shm: shared_memory.SharedMemory) -> None:
        self._buf: memoryview | None = buffer_of(shm)
        self._slots = [self.handle.slot_offset(k) for k in range(self.handle.n_slots)]
        self._asleep = [self.handle.asleep_offset(r) for r in range(self.handle.n_readers)]
        self._n_slots = self.handle.n_slots
        self._slot_size = self.handle.slot_size
        self._next_chunk = 0
        self._min_consumed = 0

    @property
    def chunks_written(self) -> int:
        return self._next_chunk

    def consumed(self) -> list[int]:
        """Chunks each reader has consumed so far."""
        buf = self._live_buf()
        return [_U64.unpack_from(buf, self.handle.counter_offset(r))[0] for r in range(self.handle.n_readers)]

    def reader_asleep(self, reader: int) -> bool:
        """Whether ``reader`` has raised its flag (``RingReader.set_asleep``)."""
        buf = self._buf  # not _live_buf(): this runs after every message
        if buf is None:
            raise ValueError(f"ring {self.handle.name} is closed")
        return bool(_U64.unpack_from(buf, self._asleep[reader])[0])

    def lagging_readers(self) -> list[int]:
        """Readers that hold up the slot the next chunk needs."""
        need = self._next_chunk - self.handle.n_slots + 1
        return [r for r, c in enumerate(self.consumed()) if c < need]

    def has_space(self) -> bool:
        need = self._next_chunk - self.handle.n_slots + 1
        if self._min_consumed >= need:
            return True
        self._min_consumed = min(self.consumed())
        return self._min_consumed >= need

    def write(
        self,
        data: bytes | bytearray | memoryview,
        wait_for_space: Callable[[], None],
        notify: Callable[[], None] = lambda: None,
        prefix: bytes = b"",
    ) -> None:
        """Publish one message, ``prefix`` then ``data`` (a header written in
        front without first joining the two: a copy of a large payload saved).
        Calls ``wait_for_space`` while the ring is full and ``notify`` after
        each chunk; an exception from either aborts the write (and leaves the
        ring unusable: a reader may hold half a message)."""
        buf = self._buf
        if buf is None:
            raise ValueError(f"ring {self.handle.name} is closed")
        head = len(prefix)
        if type(data) is bytes and head + len(data) <= self._slot_size:
            # One chunk: what almost every call and reply is. Kept apart from the
            # general loop below because it runs on every call, both ways.
            seq = self._next_chunk
            if self._min_consumed < seq - self._n_slots + 1:
                while not self.has_space():
                    wait_for_space()
            off = self._slots[seq % self._n_slots]
            pos = off + _SLOT_HDR_SIZE
            end = pos + head + len(data)
            if head:
                buf[pos : pos + head] = prefix
            buf[pos + head : end] = data
            _LENGTH_MORE.pack_into(buf, off + 8, end - pos, 0)
            _U64.pack_into(buf, off, seq + 1)  # publish last
            self._next_chunk = seq + 1
            notify()
            return
        view = memoryview(data).cast("B")
        size = self.handle.slot_size
        total = head + len(view)
        start = 0  # offset in the message, prefix included
        while True:
            while not self.has_space():
                wait_for_space()
            end = min(start + size, total)
            more = 1 if end < total else 0
            seq = self._next_chunk
            off = self._slots[seq % self.handle.n_slots]
            pos = off + _SLOT_HDR_SIZE
            if start < head:
                part = prefix[start : min(end, head)]
                buf[pos : pos + len(part)] = part
                pos += len(part)
            lo, hi = max(start - head, 0), end - head
            if hi > lo:
                buf[pos : pos + hi - lo] = view[lo:hi]
            _LENGTH_MORE.pack_into(buf, off + 8, end - start, more)
            _U64.pack_into(buf, off, seq + 1)  # publish last
            self._next_chunk = seq + 1
            notify()
            start = end
            if not more:
                return

    def unlink(self) -> None:
        """Remove the segment's name, if this writer created it: the mappings of
        every process attached so far stay valid, and nothing is left in
        /dev/shm even if this process is SIGKILLed. No process can attach
        afterwards. Idempotent."""
        if not self._owner or self._unlinked or self._shm is None:
            return
        self._unlinked = True
        try:
            self._shm.unlink()
        except FileNotFoundError:
            pass

    def _live_buf(self) -> memoryview:
        if self._buf is None:
            raise ValueError(f"ring {self.handle.name} is closed")
        return self._buf

    def close(self) -> None:
        """Unmap the segment, and unlink it if this writer created it. Idempotent."""
        self._buf = None
        shm, self._shm = self._shm, None
        if shm is None:
            return
        shm.close()
        if not self._owner or self._unlinked:
            return
        try:
            shm.unlink()
        except FileNotFoundError:
            pass


class RingReader:
    """Reader ``index`` of a ring; attach in the reading process."""

    def __init__(self, handle: RingHandle, index: int) -> None:
        if not 0 <= index < handle.n_readers:
            raise ValueError(f"RingReader: index must be in [0, {handle.n_readers}), got {index}")
        self.handle = handle
        self.index = index
        self._shm: shared_memory.SharedMemory | None = shared_memory.SharedMemory(name=handle.name, create=False)
        magic, n_readers, n_slots, slot_size = struct.unpack_from("<QQQQ", buffer_of(self._shm), 0)
        if (magic, n_readers, n_slots, slot_size) != (
            _MAGIC,
            handle.n_readers,
            handle.n_slots,
            handle.slot_size,
        ):
            raise ValueError(f"segment {handle.name} is not a ring matching {handle}")
        self._counter_off = handle.counter_offset(index)
        self._asleep_off = handle.asleep_offset(index)
        self._buf: memoryview | None = buffer_of(self._shm)
        self._slots = [handle.slot_offset(k) for k in range(handle.n_slots)]
        self._consumed = _U64.unpack_from(self._buf, self._counter_off)[0]
        self._partial: bytearray | None = None

    def poll(self) -> bytes | bytearray | None:
        """The next whole message, or None if it is not (completely) there yet."""
        buf = self._buf
        if buf is None:
            raise ValueError(f"ring {self.handle.name} is closed")
        slots = self._slots
        while True:
            seq = self._consumed
            off = slots[seq % len(slots)]
            # The stamp is read before the length: the writer stores it last.
            if _U64.unpack_from(buf, off)[0] != seq + 1:
                return None
            length, more = _LENGTH_MORE.unpack_from(buf, off + 8)
            data_off = off + _SLOT_HDR_SIZE
            if more or self._partial is not None:
                # A message of several chunks grows in one buffer (realloc moves
                # pages, not bytes), instead of a list of chunks joined at the end.
                if self._partial is None:
                    self._partial = bytearray()
                self._partial += buf[data_off : data_off + length]
            else:
                chunk = bytes(buf[data_off : data_off + length])
            self._consumed = seq + 1
            _U64.pack_into(buf, self._counter_off, self._consumed)  # frees the slot
            if more:
                continue
            if self._partial is not None:
                whole, self._partial = self._partial, None
                return whole
            return chunk

    def set_asleep(self, asleep: bool) -> None:
        """Raise (or lower) this reader's flag: the writer sees it in ``reader_asleep``."""
        buf = self._buf
        if buf is None:
            raise ValueError(f"ring {self.handle.name} is closed")
        _U64.pack_into(buf, self._asleep_off, 1 if asleep else 0)

    def close(self) -> None:
        self._buf = None
        shm, self._shm = self._shm, None
        if shm is not None:
            shm.close()
