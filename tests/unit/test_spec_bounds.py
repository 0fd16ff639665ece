"""SPEC's own time bounds as the checks wait on them: exact on a machine no
busier than its CPUs; on a loaded one stretched with the load, a late success
passing with a note that says SPEC's bound was not judged there."""

from __future__ import annotations

import time

import pytest

from harness.conformance import spec_bounds
from harness.conformance.spec_bounds import bounded_by_spec, drain_notes, raised_within, wait_within


def _load(monkeypatch: pytest.MonkeyPatch, per_cpu: float) -> None:
    monkeypatch.delenv(spec_bounds.EXACT_ENV, raising=False)
    monkeypatch.setattr(spec_bounds, "load_per_cpu", lambda: per_cpu)
    monkeypatch.setattr(spec_bounds, "load_scale", lambda: max(1.0, min(6.0, per_cpu)))


def _after(seconds: float) -> object:
    # The checks below put a late event well past the bound (a second or more):
    # a sleep on a loaded machine can overrun by tenths of a second, and the
    # last look after it would see a late event as in time.
    start = time.monotonic()
    return lambda: time.monotonic() - start >= seconds


@pytest.fixture(autouse=True)
def _no_notes_left() -> None:
    drain_notes()


def test_on_a_quiet_machine_spec_s_bound_is_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    _load(monkeypatch, 0.5)
    start = time.monotonic()
    assert not wait_within(_after(2.0), 0.3, "the event")  # type: ignore[arg-type]
    assert time.monotonic() - start < 1.5, "a quiet machine waited past SPEC's bound"
    assert drain_notes() == []


def test_on_a_loaded_machine_a_late_event_passes_and_the_note_says_the_bound_was_not_judged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _load(monkeypatch, 4.0)
    assert wait_within(_after(0.5), 0.3, "the workers' exit")  # type: ignore[arg-type]
    (note,) = drain_notes()
    assert "the workers' exit took " in note
    assert "past SPEC's 0.3 s" in note
    assert "4.0 runnable per CPU" in note
    assert "not judged" in note


def test_an_event_within_spec_s_bound_leaves_no_note_loaded_or_not(monkeypatch: pytest.MonkeyPatch) -> None:
    _load(monkeypatch, 4.0)
    assert wait_within(_after(0.05), 0.5, "the event")  # type: ignore[arg-type]
    assert drain_notes() == []


def test_on_a_loaded_machine_what_never_happens_still_fails_at_the_stretched_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _load(monkeypatch, 3.0)
    start = time.monotonic()
    assert not wait_within(lambda: False, 0.2, "the event")
    took = time.monotonic() - start
    assert 0.55 <= took < 1.5, f"gave up after {took:.2f} s, expected about 0.6 s (0.2 s times a load of 3)"
    assert drain_notes() == []


def test_exact_bounds_keep_spec_s_bound_on_a_loaded_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    _load(monkeypatch, 6.0)
    monkeypatch.setenv(spec_bounds.EXACT_ENV, "1")
    start = time.monotonic()
    # Stretched, the wait would be 3 s and see the event at 2 s.
    assert not wait_within(_after(2.0), 0.5, "the event")  # type: ignore[arg-type]
    assert time.monotonic() - start < 1.5, "HARNESS_EXACT_BOUNDS waited past SPEC's bound"


def test_a_call_on_a_loaded_machine_that_never_returns_fails_naming_spec_s_bound_and_the_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _load(monkeypatch, 2.0)
    with pytest.raises(
        AssertionError, match=r"within 0.2 s \(SPEC's bound; waited 0 s: the machine was loaded, 2.0 runnable per CPU\)"
    ):
        bounded_by_spec(lambda: time.sleep(2), 0.2, "shutdown()")


def test_a_call_past_spec_s_bound_on_a_quiet_machine_fails_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    _load(monkeypatch, 1.0)
    with pytest.raises(AssertionError, match=r"shutdown\(\) did not return within 0.2 s"):
        bounded_by_spec(lambda: time.sleep(0.5), 0.2, "shutdown()")


def test_a_slow_call_on_a_loaded_machine_returns_its_outcome_with_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    _load(monkeypatch, 5.0)

    def slow_failure() -> None:
        time.sleep(0.3)
        raise RuntimeError("rank 1 died")

    error = raised_within(slow_failure, 0.1, "a call after the death")
    assert isinstance(error, RuntimeError)
    (note,) = drain_notes()
    assert note.startswith("a call after the death took 0.")


def test_within_a_known_failure_a_bound_stays_exact_on_a_loaded_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    _load(monkeypatch, 4.0)
    assert spec_bounds.stretched(10) == 40
    with spec_bounds.exact_while(True):
        assert spec_bounds.stretched(10) == 10
        with spec_bounds.exact_while(False):  # nested: stays exact
            assert spec_bounds.stretched(10) == 10
    with spec_bounds.exact_while(False):
        assert spec_bounds.stretched(10) == 40
    assert spec_bounds.stretched(10) == 40


def test_c7s_in_time_is_exact_on_a_quiet_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.conformance.test_errors import _in_time

    _load(monkeypatch, 0.5)
    _in_time(2.9, 3.0, "TimeoutError")
    with pytest.raises(AssertionError, match=r"TimeoutError after 3\.5 s, expected within 3 s"):
        _in_time(3.5, 3.0, "TimeoutError")


def test_c7s_in_time_stretches_on_a_loaded_machine_with_a_note_and_still_fails_past_the_stretch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What a fresh-clone CI run saw: mp's TimeoutError after 9.3 s at 16.9 runnable per CPU.
    from harness.conformance.test_errors import _in_time

    _load(monkeypatch, 4.0)
    _in_time(9.3, 3.0, "TimeoutError")
    (note,) = drain_notes()
    assert "TimeoutError took 9.3 s, past SPEC's 3 s" in note and "not judged" in note
    with pytest.raises(AssertionError, match=r"expected within 3 s \(SPEC's bound; waited 12 s"):
        _in_time(12.5, 3.0, "TimeoutError")
    monkeypatch.setenv(spec_bounds.EXACT_ENV, "1")  # the meta tests' runs of broken backends
    with pytest.raises(AssertionError):
        _in_time(3.5, 3.0, "TimeoutError")
