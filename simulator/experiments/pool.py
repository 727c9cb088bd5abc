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
- workers are watched: a worker may send `Deadline(seconds)` as it starts a piece of work (a sweep point, from
  its own estimate); one that sends nothing else in that time (stuck, or stopped by SIGSTOP) is SIGKILLed and its
  task reported as `Died`. Otherwise a worker holding a task must send something every `first_deadline_s`;
- tasks are taken from an iterator only as workers become free, so a long sweep never holds them all;
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
from typing import Any, Callable, Iterable, Iterator, NamedTuple

from .memory import tune_malloc

PR_SET_PDEATHSIG = 1


class Died(NamedTuple):
    """A worker died holding this task: how (a signal's name, an exit status, a deadline it ran past)."""

    reason: str


class Done(NamedTuple):
    """A task ended: what the function returned."""

    result: Any


class Deadline(NamedTuple):
    """From a worker: kill me if I send nothing else within `seconds`."""

    seconds: float


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
        self.deadline: tuple[float, float] | None = None  # (monotonic time, the seconds it was given)
        self.reaped = False  # its pid may belong to another process now: never signal it again


class ForkPool:
    """`workers` forked processes running `function(task, send)`; tasks in, (task, message) out: what the worker
    sent with `send`, then Done(result), or Died(reason).

    `close_fds` are descriptors of the parent's that a worker must not keep (a lock, a results file).
    """

    def __init__(self, function: Callable[[Any, Callable[[Any], None]], Any], workers: int,
                 close_fds: tuple[int, ...] = (), first_deadline_s: float | None = None):
        self.function = function
        self.close_fds = close_fds
        self.first_deadline_s = first_deadline_s
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
        """Run `task` before any task not yet taken from the iterator (a retry)."""
        self.queue.append(task)

    def results(self, tasks: Iterable[Any] = ()) -> Iterator[tuple[Any, Any]]:
        """Yield (task, message) as workers send them; (task, Done(result)) when a task ends; (task, Died(reason))
        when a worker dies holding one or is killed past its deadline. Tasks come from the queue (`submit`, also
        while iterating), then from `tasks`, one per free worker. Ends when both are empty and every worker idle."""
        tasks = iter(tasks)
        while True:
            for worker in self.workers:
                if worker.task is None:
                    worker.task = self.queue.pop(0) if self.queue else next(tasks, None)
                    if worker.task is None:
                        continue
                    self._arm(worker, self.first_deadline_s)
                    with contextlib.suppress(OSError):  # a dead worker is found by wait() below
                        worker.conn.send(worker.task)
            busy = {w.conn: w for w in self.workers if w.task is not None}
            if not busy:
                return
            now = time.monotonic()
            soonest = min((w.deadline[0] for w in busy.values() if w.deadline), default=now + 1.0)
            ready = wait(list(busy), timeout=min(1.0, max(0.0, soonest - now)))
            for conn in ready:
                worker = busy[conn]
                try:
                    message = conn.recv()
                except (EOFError, OSError):
                    task, worker.task = worker.task, None
                    yield task, Died(self._replace(worker))
                    continue
                if isinstance(message, Deadline):
                    self._arm(worker, message.seconds)
                    continue
                task = worker.task
                if isinstance(message, Done):
                    worker.task, worker.deadline = None, None
                else:  # a sign of life: the next one is due within first_deadline_s
                    self._arm(worker, self.first_deadline_s)
                yield task, message
            now = time.monotonic()
            for worker in [w for w in busy.values() if w.conn not in ready and w.task is not None]:
                if worker.deadline and now > worker.deadline[0]:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(worker.pid, signal.SIGKILL)  # stuck or stopped: SIGKILL ends either
                    task, worker.task = worker.task, None
                    self._replace(worker)
                    yield task, Died(f"ran past its deadline of {worker.deadline[1]:.3g} s, killed")

    @staticmethod
    def _arm(worker: _Worker, seconds: float | None) -> None:
        worker.deadline = None if seconds is None else (time.monotonic() + seconds, seconds)

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


def _serve(conn: Connection, function: Callable[[Any, Callable[[Any], None]], Any]) -> None:
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        conn.send(Done(function(task, conn.send)))


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
