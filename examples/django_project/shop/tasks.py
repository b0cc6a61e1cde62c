"""The shop's tasks: run by ``m worker`` replicas, enqueued by the views."""

import os
from pathlib import Path

from django.tasks import TaskContext, task
from framework_m_django import periodic


def _note(line: str) -> None:
    log = os.environ.get("SHOP_LOG")
    if log:
        with Path(log).open("a") as out:
            out.write(line + "\n")


@task
def total(order_id: str, prices: list[int]) -> int:
    """Add up an order: the view reads the sum back with get_result()."""
    _note(f"total {order_id} {os.getpid()}")
    return sum(prices)


@periodic(every_seconds=1)
@task(takes_context=True)
def heartbeat(context: TaskContext) -> None:
    """Ticked by every worker replica, run once per second."""
    _note(f"heartbeat {context.task_result.id} {os.getpid()}")
