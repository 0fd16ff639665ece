"""Unit tests of harness.backends: built-in names, 'module:attr', entry points, declarations."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import backends
from harness.backends import (
    BUILTIN_BACKENDS,
    CAPABILITIES,
    BackendUnavailableError,
    LoadedBackend,
    available_backends,
    load_backend,
)
from harness.contract import CLAUSES, ExecutorConfig


def my_factory(config: ExecutorConfig) -> Any:
    """A backend factory importable as ``tests.unit.test_backends:my_factory``."""
    return ("made", config)


my_factory.unsupported = {"C13": "the caller is never SIGKILLed here"}  # type: ignore[attr-defined]
my_factory.world_sizes = [1, 2, 4]  # type: ignore[attr-defined]


def plain_factory(config: ExecutorConfig) -> Any:
    return config


namespace = types.SimpleNamespace(factory=plain_factory)
not_callable = 42


def _factory_with(**declarations: Any) -> Any:
    def factory(config: ExecutorConfig) -> Any:
        return config

    for key, value in declarations.items():
        setattr(factory, key, value)
    return factory


class FakeEntryPoint:
    def __init__(self, name: str, obj: Any) -> None:
        self.name = name
        self.obj = obj
        self.loads = 0

    def load(self) -> Any:
        self.loads += 1
        return self.obj


@pytest.fixture
def no_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends, "_entry_points", dict)


@pytest.fixture
def tmp_backend_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh module on sys.path with a factory ``create``, removed afterwards."""
    name = "harness_unit_tmp_backend"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(
            """
            def create(config):
                return ("tmp", config)

            create.unsupported = {"C19": "polls", "gc_shutdown": "needs an explicit shutdown"}
            create.world_sizes = (2,)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(name, None)
    try:
        yield name
    finally:
        sys.modules.pop(name, None)


# --------------------------------------------------------------------------- built-ins


def test_uni_loads_with_its_declarations() -> None:
    b = load_backend("uni")
    assert isinstance(b, LoadedBackend)
    assert b.name == "uni"
    assert callable(b.factory)
    assert b.world_sizes == (1,)
    assert b.supports_world_size(1)
    assert not b.supports_world_size(2)
    assert "C18" in b.unsupported
    assert len(b.unsupported) > 1
    assert set(b.unsupported) <= set(CLAUSES) | set(CAPABILITIES)
    assert all(isinstance(r, str) and r.strip() for r in b.unsupported.values())
    assert b.declared("C18") == b.unsupported["C18"]
    assert b.declared("C1") is None


def test_mp_loads_and_declares_nothing() -> None:
    b = load_backend("mp")
    assert b.name == "mp"
    assert callable(b.factory)
    assert dict(b.unsupported) == {}
    assert b.world_sizes is None
    assert b.supports_world_size(1)
    assert b.supports_world_size(8)
    assert all(b.declared(c) is None for c in CLAUSES)


def test_builtin_name_is_stripped() -> None:
    assert load_backend("  uni ").name == "uni"


def test_builtin_backends_are_available() -> None:
    names = available_backends()
    assert {"uni", "mp"} <= set(names)
    assert names == sorted(names)
    assert set(BUILTIN_BACKENDS) == {"uni", "mp", "ray", "ray-graph", "vllm-mp", "vllm-uni", "vllm-ray"}


@pytest.mark.parametrize("name", ["vllm-mp", "vllm-uni", "vllm-ray"])
def test_vllm_without_vllm_installed_is_unavailable_with_the_install_command(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)
    monkeypatch.delitem(sys.modules, "harness.executors.vllm", raising=False)
    with pytest.raises(BackendUnavailableError, match=r"make install-vllm'") as info:
        load_backend(name)
    assert f"backend {name!r} is not available" in str(info.value)
    assert "pip install 'executor-harness[vllm]'" in str(info.value)


def test_a_built_in_backend_that_refuses_here_says_why_without_an_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    # What vllm-ray does on a CPU platform: its module imports, its factory refuses.
    refuser = types.ModuleType("refuser_for_test")

    def refuse(name: str) -> Any:
        raise ImportError("the platform has no Ray device key (refuser.py:3)", name="refuser_for_test")

    refuser.__getattr__ = refuse  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, "refuser_for_test", refuser)
    monkeypatch.setitem(backends.BUILTIN_BACKENDS, "refusing", ("refuser_for_test:create", "pip install it"))  # type: ignore[index]
    with pytest.raises(BackendUnavailableError) as info:
        load_backend("refusing")
    assert "the platform has no Ray device key (refuser.py:3)" in str(info.value)
    assert "install it with" not in str(info.value)


def test_ray_without_ray_installed_is_unavailable_with_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # what a missing package looks like to import
    monkeypatch.delitem(sys.modules, "harness.executors.ray", raising=False)
    with pytest.raises(BackendUnavailableError, match=r"pip install 'executor-harness\[ray\]'") as info:
        load_backend("ray")
    assert "backend 'ray' is not available" in str(info.value)


@pytest.mark.parametrize(("name", "declared"), [("ray", "['C23']"), ("ray-graph", "['C10','C23','C25']")])
def test_loading_ray_does_not_import_ray(name: str, declared: str) -> None:
    # Ray reads its settings from the environment when imported: a test process
    # must get the run's cluster environment first, so loading stays import-free.
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed")
    code = (
        f"import sys; from harness.backends import load_backend; b = load_backend({name!r}); "
        "print('ray' in sys.modules, str(sorted(b.unsupported)).replace(' ', ''), b.start_methods, "
        "b.session is not None)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["False", declared, "('spawn',)", "True"], out.stdout + out.stderr


def test_both_ray_backends_share_one_run_wide_cluster() -> None:
    # Two clusters in one run would double Ray's own processes on a small machine.
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed")
    assert load_backend("ray").session is load_backend("ray-graph").session


def test_session_must_be_callable(monkeypatch: pytest.MonkeyPatch) -> None:
    def factory(config: Any) -> Any:
        raise AssertionError("not called")

    factory.session = "a cluster"  # type: ignore[attr-defined]
    monkeypatch.setattr(sys.modules[__name__], "_session_factory", factory, raising=False)
    with pytest.raises(TypeError, match="'session' must be a callable"):
        load_backend(f"{__name__}:_session_factory")


def test_builtin_with_missing_module_is_backend_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(backends.BUILTIN_BACKENDS, "fancy", ("harness_no_such_module_xyz:create", "pip install x"))  # type: ignore[arg-type]
    with pytest.raises(BackendUnavailableError, match="pip install x") as info:
        load_backend("fancy")
    assert isinstance(info.value, ImportError)
    assert "harness_no_such_module_xyz" in str(info.value)


# --------------------------------------------------------------------------- module:attr


def test_module_attr_in_the_test_module() -> None:
    b = load_backend("tests.unit.test_backends:my_factory")
    assert b.factory is my_factory
    assert b.name == "tests.unit.test_backends:my_factory"
    assert dict(b.unsupported) == {"C13": "the caller is never SIGKILLed here"}
    assert b.world_sizes == (1, 2, 4)
    assert b.supports_world_size(4)
    assert not b.supports_world_size(3)
    config = ExecutorConfig(world_size=2)
    assert b.factory(config) == ("made", config)


def test_module_attr_without_declarations() -> None:
    b = load_backend(f"{__name__}:plain_factory")
    assert b.factory is plain_factory
    assert dict(b.unsupported) == {}
    assert b.world_sizes is None


def test_module_attr_dotted_attribute() -> None:
    assert load_backend(f"{__name__}:namespace.factory").factory is plain_factory


def test_module_attr_imports_a_fresh_module(tmp_backend_module: str) -> None:
    b = load_backend(f"{tmp_backend_module}:create")
    assert tmp_backend_module in sys.modules
    assert b.world_sizes == (2,)
    assert dict(b.unsupported) == {"C19": "polls", "gc_shutdown": "needs an explicit shutdown"}
    assert b.declared("C12") == "needs an explicit shutdown"  # a capability answers for its clause
    config = ExecutorConfig(world_size=2)
    assert b.factory(config) == ("tmp", config)


def test_not_callable_attr_raises_type_error() -> None:
    with pytest.raises(TypeError, match="not callable"):
        load_backend(f"{__name__}:not_callable")


def test_missing_module_raises_import_error_naming_it() -> None:
    with pytest.raises(ImportError, match="nosuchmod") as info:
        load_backend("nosuchmod:x")
    assert "'nosuchmod:x'" in str(info.value)
    assert not isinstance(info.value, BackendUnavailableError)


def test_missing_attr_raises_import_error_naming_it() -> None:
    with pytest.raises(ImportError, match="nosuchattr") as info:
        load_backend("harness:nosuchattr")
    assert "'harness'" in str(info.value)


@pytest.mark.parametrize("spec", ["harness:", ":create"])
def test_half_a_module_attr_spec_raises_value_error(spec: str) -> None:
    with pytest.raises(ValueError, match="module:attr"):
        load_backend(spec)


@pytest.mark.parametrize("spec", ["", "   ", None, 3])
def test_empty_or_non_string_spec_raises_value_error(spec: Any) -> None:
    with pytest.raises(ValueError, match="non-empty string"):
        load_backend(spec)


# --------------------------------------------------------------------------- unknown names, entry points


def test_unknown_name_lists_the_known_backends(no_entry_points: None) -> None:
    with pytest.raises(ValueError, match="nosuchbackend") as info:
        load_backend("nosuchbackend")
    msg = str(info.value)
    assert "mp, ray, ray-graph, uni" in msg
    assert "module:attr" in msg


def test_unknown_name_with_real_entry_points_still_lists_builtins() -> None:
    with pytest.raises(ValueError) as info:
        load_backend("nosuchbackend")
    assert "mp" in str(info.value)
    assert "uni" in str(info.value)


def test_entry_point_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    factory = _factory_with(unsupported={"C16": "no model"}, world_sizes=(2, 4))
    ep = FakeEntryPoint("thirdparty", factory)
    monkeypatch.setattr(backends, "_entry_points", lambda: {"thirdparty": ep})
    assert "thirdparty" in available_backends()
    assert available_backends() == sorted([*BUILTIN_BACKENDS, "thirdparty"])
    b = load_backend("thirdparty")
    assert ep.loads == 1
    assert b.name == "thirdparty"
    assert b.factory is factory
    assert dict(b.unsupported) == {"C16": "no model"}
    assert b.world_sizes == (2, 4)
    with pytest.raises(ValueError, match="mp, ray, ray-graph, thirdparty, uni"):
        load_backend("other")


def test_entry_point_does_not_shadow_a_builtin(monkeypatch: pytest.MonkeyPatch) -> None:
    ep = FakeEntryPoint("uni", plain_factory)
    monkeypatch.setattr(backends, "_entry_points", lambda: {"uni": ep})
    assert load_backend("uni").factory is not plain_factory
    assert ep.loads == 0


def test_real_entry_points_group_is_queried(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def fake(*, group: str) -> list[FakeEntryPoint]:
        seen.append(group)
        return [FakeEntryPoint("viaep", plain_factory)]

    monkeypatch.setattr(backends.importlib.metadata, "entry_points", fake)
    assert load_backend("viaep").factory is plain_factory
    assert seen == ["harness.backends"]


# --------------------------------------------------------------------------- declarations


@pytest.mark.parametrize("key", ["C99", "C0", "c1", "closure", "", 18])
def test_declaration_of_an_unknown_clause_raises(monkeypatch: pytest.MonkeyPatch, key: Any) -> None:
    factory = _factory_with(unsupported={key: "a reason"})
    monkeypatch.setattr(backends, "_entry_points", lambda: {"decl": FakeEntryPoint("decl", factory)})
    with pytest.raises(ValueError, match="neither a clause") as info:
        load_backend("decl")
    assert repr(key) in str(info.value)


@pytest.mark.parametrize("reason", ["", "   ", None, 3])
def test_declaration_with_an_empty_reason_raises(monkeypatch: pytest.MonkeyPatch, reason: Any) -> None:
    factory = _factory_with(unsupported={"C5": reason})
    monkeypatch.setattr(backends, "_entry_points", lambda: {"decl": FakeEntryPoint("decl", factory)})
    with pytest.raises(ValueError, match="'C5' must be a non-empty string"):
        load_backend("decl")


def test_unsupported_must_be_a_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    factory = _factory_with(unsupported=["C5"])
    monkeypatch.setattr(backends, "_entry_points", lambda: {"decl": FakeEntryPoint("decl", factory)})
    with pytest.raises(TypeError, match="must map clause ids"):
        load_backend("decl")


@pytest.mark.parametrize("world_sizes", [(), (0,), (2, -1), (1.5,), ("2",)])
def test_bad_world_sizes_raise(monkeypatch: pytest.MonkeyPatch, world_sizes: Any) -> None:
    factory = _factory_with(world_sizes=world_sizes)
    monkeypatch.setattr(backends, "_entry_points", lambda: {"decl": FakeEntryPoint("decl", factory)})
    with pytest.raises(ValueError, match="'world_sizes' must be ints >= 1"):
        load_backend("decl")


@pytest.mark.parametrize("nodes", [(), (0,), (1, -2), (2.0,), (True,), "2", 2])
def test_bad_node_counts_raise(monkeypatch: pytest.MonkeyPatch, nodes: Any) -> None:
    factory = _factory_with(nodes=nodes)
    monkeypatch.setattr(backends, "_entry_points", lambda: {"decl": FakeEntryPoint("decl", factory)})
    with pytest.raises(ValueError, match="'nodes' must be node counts, ints >= 1") as info:
        load_backend("decl")
    assert repr(tuple(nodes) if isinstance(nodes, tuple) else nodes) in str(info.value)


def test_node_counts_default_to_one_node_and_are_read_from_the_factory(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_backend("mp").nodes == (1,) and not load_backend("mp").supports_nodes(2)
    factory = _factory_with(nodes=[1, 2])
    monkeypatch.setattr(backends, "_entry_points", lambda: {"decl": FakeEntryPoint("decl", factory)})
    loaded = load_backend("decl")
    assert loaded.nodes == (1, 2) and loaded.supports_nodes(2) and not loaded.supports_nodes(4)


def test_bool_world_sizes_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    factory = _factory_with(world_sizes=(True, 2))
    monkeypatch.setattr(backends, "_entry_points", lambda: {"decl": FakeEntryPoint("decl", factory)})
    with pytest.raises(ValueError, match="'world_sizes' must be ints >= 1"):
        load_backend("decl")


def test_extra_unsupported_merges_with_the_declarations() -> None:
    b = load_backend("uni", extra_unsupported={"C5": "too slow here", "C18": "overridden reason"})
    assert b.unsupported["C5"] == "too slow here"
    assert b.unsupported["C18"] == "overridden reason"
    assert {"C7", "C8", "C9"} <= set(b.unsupported)
    plain = load_backend("uni")  # the factory's own declaration is not changed
    assert "C5" not in plain.unsupported
    assert plain.unsupported["C18"] != "overridden reason"
    m = load_backend("mp", extra_unsupported={"gc_shutdown": "reason"})
    assert dict(m.unsupported) == {"gc_shutdown": "reason"}
    assert m.declared("C12") == "reason"


def test_extra_unsupported_is_validated() -> None:
    with pytest.raises(ValueError, match="'C99'"):
        load_backend("mp", extra_unsupported={"C99": "no such clause"})
    with pytest.raises(ValueError, match="non-empty string"):
        load_backend("mp", extra_unsupported={"C5": ""})


def test_capabilities_name_real_clauses() -> None:
    assert set(CAPABILITIES.values()) <= set(CLAUSES)


@pytest.mark.parametrize("preload", ["vllm", ("ok", ""), (1,)])
def test_preload_must_be_module_names(monkeypatch: pytest.MonkeyPatch, preload: Any) -> None:
    def factory(config: Any) -> Any:
        raise AssertionError("not called")

    factory.preload = preload  # type: ignore[attr-defined]
    monkeypatch.setattr(sys.modules[__name__], "_preload_factory", factory, raising=False)
    with pytest.raises(TypeError, match=r"backend '.*_preload_factory': 'preload' must be a sequence of module names"):
        load_backend(f"{__name__}:_preload_factory")


def test_preload_is_read_as_a_tuple(monkeypatch: pytest.MonkeyPatch) -> None:
    def factory(config: Any) -> Any:
        raise AssertionError("not called")

    factory.preload = ["json", " csv "]  # type: ignore[attr-defined]
    monkeypatch.setattr(sys.modules[__name__], "_preload_factory", factory, raising=False)
    assert load_backend(f"{__name__}:_preload_factory").preload == ("json", "csv")
