"""The tasks of this process that run on framework-m, as their modules define them.

Django keeps no list of a project's tasks: each ``@task`` makes its backend's
``task_class``. :class:`FrameworkMTask` is ours, and notes each task it makes, so the
worker (:mod:`.worker`) finds them once the task modules are imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from django.tasks.base import Task, TaskResult

if TYPE_CHECKING:
    AnyTask: TypeAlias = Task[..., Any]
    AnyResult: TypeAlias = TaskResult[..., Any]

#: Each task made with this backend, by its module path (the first made: ``.using()``
#: makes copies with other defaults, which run the same function).
TASKS: dict[str, AnyTask] = {}


@dataclass(frozen=True, slots=True, kw_only=True)
class FrameworkMTask(Task):  # type: ignore[type-arg]
    """A Django task of a framework-m backend, noted as it is made."""

    def __post_init__(self) -> None:
        super(FrameworkMTask, self).__post_init__()
        TASKS.setdefault(self.module_path, self)
