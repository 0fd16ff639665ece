"""What travels between the caller and a worker: requests and replies, both ways intact."""

from __future__ import annotations

import pickle
import sys
from typing import Any

import pytest

from harness.conformance import probes
from harness.executors.futures import Reply
from harness.executors.mp.worker import Worker, decode_reply, encode_reply, run_call


@pytest.mark.parametrize(
    "reply",
    [
        Reply(0, 7),
        Reply(3, 2**40, None),
        Reply(1, 9, 0),
        Reply(1, 9, ""),
        Reply(1, 9, b"N"),  # a value that starts like the short form's marker
        Reply(2, 5, [None, None]),
        Reply(0, 1, None, ("KeyError", "'x'", "Traceback ...")),
        Reply(0, -2, 12345),
    ],
)
def test_a_reply_decodes_to_what_was_encoded(reply: Reply) -> None:
    assert decode_reply(encode_reply(reply)) == reply


def test_a_none_reply_is_sent_without_pickling() -> None:
    raw = encode_reply(Reply(1, 42))
    assert len(raw) < len(pickle.dumps((1, 42, None, None), protocol=pickle.HIGHEST_PROTOCOL))
    with pytest.raises(pickle.UnpicklingError):
        pickle.loads(raw)


def test_an_unpicklable_result_becomes_an_error_reply_naming_its_type() -> None:
    reply = decode_reply(encode_reply(Reply(1, 3, lambda: None)))
    assert reply.value is None and reply.error is not None
    assert "could not be pickled" in reply.error[1] and "function" in reply.error[1]


class _GoneInTheCaller:
    """A result whose class the caller cannot find when it unpickles."""


def test_a_result_the_caller_cannot_unpickle_answers_its_own_call_with_an_error(monkeypatch: Any) -> None:
    raw = encode_reply(Reply(2, 11, _GoneInTheCaller()))
    monkeypatch.delattr(sys.modules[__name__], "_GoneInTheCaller")
    reply = decode_reply(raw)
    assert (reply.rank, reply.call_id, reply.value) == (2, 11, None)
    assert reply.error is not None and "could not be unpickled in the caller" in reply.error[1]


def _kw(worker: Any, *args: Any, **kwargs: Any) -> Any:
    return args, kwargs


@pytest.mark.parametrize(
    "request_, value",
    [
        (("ping", (), None, None), 1),
        ((_kw, (1, 2), {"a": 3}, None), ((1, 2), {"a": 3})),
        ((_kw, (), {}, None), ((), {})),
        ((probes.echo_value, ("v",), None, 0), None),  # rank 1 is not the unique reply rank
        ((probes.echo_value, ("v",), None, 1), "v"),
    ],
)
def test_run_call_runs_the_request_tuple_as_unpickled(request_: tuple[Any, ...], value: Any) -> None:
    assert run_call(Worker(1, 2, "cpu"), 5, request_) == Reply(1, 5, value)


@pytest.mark.parametrize(
    "request_, message",
    [
        (("nope", (), None, None), "has no method 'nope'"),
        (("ping", ()), "not enough values to unpack"),
        (42, "cannot unpack"),
    ],
)
def test_a_bad_request_becomes_an_error_reply(request_: Any, message: str) -> None:
    reply = run_call(Worker(1, 2, "cpu"), 5, request_)
    assert reply.rank == 1 and reply.call_id == 5 and reply.value is None
    assert reply.error is not None and message in reply.error[1]
