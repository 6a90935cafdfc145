"""Work a placement worker starts and does not await: defragmentation plans, retries after node bursts,
reconciliations of a cluster just loaded. One set of tasks, shared by the handlers that start them (bootstrap
hands the same one to each), so that shutdown and tests wait for all of it (PlacementService.drain), and a task
that fails is logged by name rather than lost."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

log = logging.getLogger(__name__)
_T = TypeVar("_T")


class Background:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, work: Coroutine[Any, Any, _T]) -> asyncio.Task[_T]:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        return iter(list(self._tasks))

    def __bool__(self) -> bool:
        return bool(self._tasks)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            name = getattr(task.get_coro(), "__qualname__", task.get_name())  # a coroutine's: the function's
            log.error("%s failed", name, exc_info=task.exception())


__all__ = ["Background"]
