"""A worker in several processes: ``Worker(..., processes=N).run()``.

Python runs one thread of Python code at a time, so a handler that computes, and the library's
own per-message work, use one core per process. With ``processes=N`` the worker forks N
processes that share nothing but the database: each drops the connections it inherited
(``Engine.dispose(close=False)``: they stay open for the parent) and opens its own, then runs
the worker as one process would. The parent only watches them: SIGTERM or SIGINT to it, or its
worker's ``stop()``, is passed to every child, which finishes as a worker does (unstarted
messages released, running handlers given ``grace_period``); a child that dies while the
others work is started again. Forking needs POSIX (Linux, macOS).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlalchemy as sa
    from sqlalchemy.ext.asyncio import AsyncEngine

log = logging.getLogger("sqldelay.worker")

# how often the parent looks at its children and its stop flag
WATCH_INTERVAL = 0.1


def supervise(processes: int, child: Callable[[], object], stop: threading.Event,
              engines: Iterable[sa.Engine | AsyncEngine]) -> None:
    """Run ``child()`` in ``processes`` forked processes until ``stop`` is set and they have
    all finished. A child that exits while ``stop`` is unset is started again."""
    engines = list(engines)
    children: dict[int, int] = {}  # pid -> slot
    for slot in range(processes):
        children[_fork(child, engines, slot)] = slot
    log.info("worker: %d processes started (%s)", processes,
             ", ".join(str(pid) for pid in children))
    signalled = False
    while children:
        if stop.is_set() and not signalled:
            for pid in children:
                _signal(pid, signal.SIGTERM)
            signalled = True
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if not done:
                continue
            slot = children.pop(pid)
            code = os.waitstatus_to_exitcode(status)
            if stop.is_set():
                continue
            log.warning("worker process %d (slot %d) ended with %s; starting another",
                        pid, slot, code)
            children[_fork(child, engines, slot)] = slot
        stop.wait(WATCH_INTERVAL)
    log.info("worker: every process has finished")


def _fork(child: Callable[[], object], engines: list[sa.Engine | AsyncEngine],
          slot: int) -> int:
    pid = os.fork()
    if pid:
        return pid
    # the child: never returns into the parent's code
    code = 1
    try:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)  # until the worker installs its own
        for engine in engines:
            getattr(engine, "sync_engine", engine).dispose(close=False)
        child()
        code = 0
    except BaseException:  # a crash of this child: said, and its parent starts another
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:  # it has ended already
        pass
