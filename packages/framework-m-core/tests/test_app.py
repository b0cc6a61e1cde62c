from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from framework_m_core import App, AppLoadError, Every, JobContext, JobDefinitionError, load_app


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


def test_a_handler_without_a_signature_is_refused_at_registration() -> None:
    app = App()
    with pytest.raises(JobDefinitionError, match="handler has no signature"):
        app.job(name="smallest")(min)  # a builtin: no signature to check kwargs against
    assert "smallest" not in app.jobs
