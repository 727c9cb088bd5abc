"""Local sweep workers: forked, long-lived, one task at a time each, supervised; they die with their parent.

Why not concurrent.futures: a worker killed there breaks the whole pool and fails every queued task, and a killed
parent leaves spawned workers running (holding its stdout and stderr, and POSIX semaphores in /dev/shm). Here:
- each worker is forked from the parent (it inherits the imported simulator and any warm caches; no re-import) and
  talks to it over its own socket pair: no semaphores, no shared queues;
- a worker asks for the kernel to SIGKILL it when its parent dies (prctl PR_SET_PDEATHSIG on Linux; elsewhere a
  thread watches the parent's pid), ignores SIGINT (Ctrl-C stops the parent, which then stops the workers) and
  points its stdin, stdout and stderr at /dev/null, so nobody waits on a pipe it holds;
- the parent knows which task each worker holds: when one dies, `results()` reports that task as `Died` and a
  fresh worker takes its place; the caller decides whether to retry;
- glibc's malloc is told to keep freed memory instead of trimming and re-faulting it (M_TRIM_THRESHOLD,
  M_MMAP_THRESHOLD, M_TOP_PAD): a sweep point allocates and frees the same arrays over and over, and returning
  them to the kernel each time costs page faults (system time) on the next point.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection, Pipe, wait
from typing import Any, Callable, Iterator, NamedTuple

from .memory import tune_malloc

PR_SET_PDEATHSIG = 1


class Died(NamedTuple):
    """A worker died holding this task: how (a signal's name or an exit status)."""

    reason: str


def die_with_parent(parent: int) -> None:
    """Be killed when `parent` exits: PR_SET_PDEATHSIG where the kernel offers it, else a watching thread."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        armed = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        armed = False
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)
    if not armed:
        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(0.5)
            os._exit(1)

        threading.Thread(target=watch, daemon=True).start()


class _Worker:
    def __init__(self, pid: int, conn: Connection):
        self.pid = pid
        self.conn = conn
        self.task: Any = None  # the task it holds, or None when idle
        self.reaped = False  # its pid may belong to another process now: never signal it again


class ForkPool:
    """`workers` forked processes running `function(task)`; tasks in, (task, result or Died) out.

    `close_fds` are descriptors of the parent's that a worker must not keep (a lock, a results file).
    """

    def __init__(self, function: Callable[[Any], Any], workers: int, close_fds: tuple[int, ...] = ()):
        self.function = function
        self.close_fds = close_fds
        self.parent = os.getpid()
        self.queue: list[Any] = []
        self.workers: list[_Worker] = []
        self.restarts = 0
        try:
            for _ in range(workers):
                self.workers.append(self._fork())
        except BaseException:
            self.kill()
            raise

    def submit(self, task: Any) -> None:
        self.queue.append(task)

    def results(self) -> Iterator[tuple[Any, Any]]:
        """Yield (task, result) as tasks finish, or (task, Died(reason)) when a worker dies holding one; tasks
        submitted while iterating are run too. Ends when the queue is empty and every worker is idle."""
        while self.queue or any(w.task is not None for w in self.workers):
            for worker in self.workers:
                if worker.task is None and self.queue:
                    worker.task = self.queue.pop(0)
                    with contextlib.suppress(OSError):  # a dead worker is found by wait() below
                        worker.conn.send(worker.task)
            busy = {w.conn: w for w in self.workers if w.task is not None}
            for conn in wait(list(busy), timeout=1.0):
                worker = busy[conn]
                task, worker.task = worker.task, None
                try:
                    result = conn.recv()
                except (EOFError, OSError):
                    yield task, Died(self._replace(worker))
                    continue
                yield task, result

    def _replace(self, worker: _Worker) -> str:
        """Reap a dead worker, start another in its place; returns how the dead one ended."""
        worker.conn.close()
        reason = _reap(worker.pid)
        worker.reaped = True
        self.workers.remove(worker)
        self.restarts += 1
        self.workers.append(self._fork())
        return reason

    def _fork(self) -> _Worker:
        parent_end, child_end = Pipe(duplex=True)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the worker: never returns into the parent's code
            status = 1
            try:
                parent_end.close()
                _become_worker(self.parent, self.close_fds + tuple(w.conn.fileno() for w in self.workers))
                _serve(child_end, self.function)
                status = 0
            finally:
                os._exit(status)
        child_end.close()
        return _Worker(pid, parent_end)

    def close(self, grace_s: float = 2.0) -> None:
        """Let idle workers exit (they see the end of their pipe); kill any still there after `grace_s`."""
        for worker in self.workers:
            worker.conn.close()
        deadline = time.monotonic() + grace_s
        for worker in self.workers:
            while not worker.reaped and time.monotonic() < deadline:
                try:
                    worker.reaped = os.waitpid(worker.pid, os.WNOHANG) != (0, 0)
                except ChildProcessError:
                    worker.reaped = True
                if not worker.reaped:
                    time.sleep(0.01)
        self.kill()

    def kill(self) -> None:
        """SIGKILL every worker still alive and reap them all (no zombies, no orphans)."""
        for worker in self.workers:
            with contextlib.suppress(OSError):
                worker.conn.close()
            if not worker.reaped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.pid, signal.SIGKILL)
                _reap(worker.pid)
                worker.reaped = True
        self.workers = []

    def __enter__(self) -> "ForkPool":
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if kind is None:
            self.close()
        else:  # interrupted or failed: the work in flight is thrown away, the workers stop now
            self.kill()


def _become_worker(parent: int, close_fds: tuple[int, ...]) -> None:
    die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for fd in close_fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    tune_malloc()


def _serve(conn: Connection, function: Callable[[Any], Any]) -> None:
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        conn.send(function(task))


def _reap(pid: int) -> str:
    """Wait for a worker that has ended or been killed; its end as words."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return "worker ended"
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            return f"killed by {signal.Signals(number).name}"
        except ValueError:
            return f"killed by signal {number}"
    return f"worker exited with status {os.WEXITSTATUS(status)}"
