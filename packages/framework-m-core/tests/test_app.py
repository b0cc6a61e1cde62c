from __future__ import annotations

import inspect
import itertools
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from framework_m_core import App, AppLoadError, Every, JobContext, JobDefinitionError, load_app
from framework_m_core.jobs import JobSpec


def test_decorator_forms() -> None:
    app = App(max_attempts=7)

    @app.job
    async def plain(ctx: JobContext) -> None: ...

    @app.job(name="custom.name", every=10, max_attempts=2, timeout=5)
    async def other(ctx: JobContext) -> None: ...

    assert set(app.jobs) == {"plain", "custom.name"}
    assert app.jobs["plain"].max_attempts == 7
    assert app.jobs["plain"].schedule is None
    spec = app.jobs["custom.name"]
    assert (spec.schedule, spec.max_attempts, spec.timeout) == (Every(10), 2, 5)
    assert [s.name for s in app.scheduled()] == ["custom.name"]


def test_definition_errors() -> None:
    app = App()

    @app.job
    async def dup(ctx: JobContext) -> None: ...

    with pytest.raises(JobDefinitionError, match="registered twice"):
        app.job(name="dup")(dup)
    with pytest.raises(JobDefinitionError, match="'async def' or 'def' function"):

        @app.job
        async def generator(ctx: JobContext) -> AsyncIterator[None]:
            yield None

    with pytest.raises(JobDefinitionError, match="invalid job name"):
        app.job(name="has space")(dup)
    with pytest.raises(JobDefinitionError, match="max_attempts must be >= 1"):
        app.job(name="x", max_attempts=0)(dup)
    with pytest.raises(JobDefinitionError, match="timeout"):
        app.job(name="y", timeout=-1)(dup)


def test_load_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "goodapp.py").write_text("from framework_m_core import App\nmine = App()\n")
    (tmp_path / "brokenapp.py").write_text("import does_not_exist\n")
    (tmp_path / "notapp.py").write_text("app = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert isinstance(load_app("goodapp:mine"), App)
        with pytest.raises(AppLoadError, match="has no attribute 'app'"):
            load_app("goodapp")
        with pytest.raises(AppLoadError, match="cannot import app module 'brokenapp'"):
            load_app("brokenapp")
        with pytest.raises(AppLoadError, match="cannot import app module 'nosuchmodule'"):
            load_app("nosuchmodule")
        with pytest.raises(AppLoadError, match=r"is a int, not a framework_m_core\.App"):
            load_app("notapp")
        with pytest.raises(AppLoadError, match="no app given"):
            load_app("")
    finally:
        for name in ("goodapp", "brokenapp", "notapp"):
            sys.modules.pop(name, None)


def test_without_a_target_the_one_provider_that_recognises_the_environment_gives_the_app(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from importlib.metadata import EntryPoint

    import framework_m_core.app as app_module

    found = App()
    providers = {
        "none": lambda: None,
        "one": lambda: found,
        "other": lambda: App(),
        "bad": lambda: 42,
        "fails": lambda: (_ for _ in ()).throw(RuntimeError("settings missing")),
    }
    chosen: list[str] = []

    class Provider(EntryPoint):
        def load(self) -> Any:
            return providers[self.name]

    def entry_points(group: str) -> list[EntryPoint]:
        assert group == "framework_m.apps"
        return [Provider(name, f"x:{name}", group) for name in chosen]

    monkeypatch.setattr(app_module, "entry_points", entry_points)
    chosen[:] = ["none", "one"]
    assert load_app("") is found
    chosen[:] = ["one", "other"]
    with pytest.raises(AppLoadError, match=r"several providers found one \(one, other\)"):
        load_app("")
    chosen[:] = ["none"]
    with pytest.raises(AppLoadError, match="no app given"):
        load_app("")
    chosen[:] = ["bad"]
    with pytest.raises(AppLoadError, match="gave a int, not an App"):
        load_app("")
    chosen[:] = ["fails"]
    with pytest.raises(AppLoadError, match="the fails app provider failed: RuntimeError"):
        load_app("")


def test_a_handler_without_a_signature_is_refused_at_registration() -> None:
    app = App()
    with pytest.raises(JobDefinitionError, match="handler has no signature"):
        app.job(name="smallest")(min)  # a builtin: no signature to check kwargs against
    assert "smallest" not in app.jobs


async def _ctx_only(ctx): ...  # type: ignore[no-untyped-def]
async def _one(ctx, to): ...  # type: ignore[no-untyped-def]
async def _default(ctx, to, cc=None): ...  # type: ignore[no-untyped-def]
async def _kw_only(ctx, *, to, cc=1): ...  # type: ignore[no-untyped-def]
async def _var_kw(ctx, to, **rest): ...  # type: ignore[no-untyped-def]
async def _var_pos(ctx, *args, to=1): ...  # type: ignore[no-untyped-def]
async def _pos_only_ctx(ctx, /, to, **rest): ...  # type: ignore[no-untyped-def]
async def _pos_only_more(ctx, to, /, cc=1): ...  # type: ignore[no-untyped-def]
async def _no_ctx(**rest): ...  # type: ignore[no-untyped-def]
async def _kw_ctx(*, ctx, to): ...  # type: ignore[no-untyped-def]


@pytest.mark.parametrize(
    "handler",
    [
        _ctx_only, _one, _default, _kw_only, _var_kw, _var_pos,
        _pos_only_ctx, _pos_only_more, _no_ctx, _kw_ctx,
    ],
)  # fmt: skip
def test_the_kwargs_check_agrees_with_binding_the_signature(handler: Any) -> None:
    """Every delivery's kwargs are checked with sets computed once; the answer must be
    the one ``inspect.Signature.bind`` gives, with its message when it refuses."""
    spec = JobSpec("j", handler)
    names = ["to", "cc", "ctx", "rest", "args", "other"]
    for size in range(4):
        for keys in itertools.combinations(names, size):
            kwargs = dict.fromkeys(keys, 1)
            try:
                inspect.signature(handler).bind(None, **kwargs)
                expected = None
            except TypeError as exc:
                expected = str(exc)
            assert spec.kwargs_problem(kwargs) == expected, (handler.__name__, keys)
