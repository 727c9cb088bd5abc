"""Sweep points on a Dask cluster: the scheduler checked before use, tasks sent a window at a time, workers watched.

- Before a Client is made, the address is probed: a Dask scheduler greets a new connection with a small framed
  handshake (an 8-byte length, then that many bytes). Anything else (an SSH banner, an HTTP server's silence, a
  closed port) is one line, exit 2; without the probe, distributed reads a banner's first 8 bytes as a frame length
  and tries to allocate exabytes.
- At most `window` tasks are in the cluster at once (four per worker thread), taken from the sweep's lazy tasks.
- A cluster with no live worker for `no_worker_s` seconds (all died, or never joined) ends the sweep with
  ClusterLost, one line; finished rows are on disk and a rerun resumes.
"""
from __future__ import annotations

import socket
import struct
import time
from typing import Any, Callable, Iterator
from urllib.parse import urlsplit

from ..config.errors import ConfigError

PROBE_S = 5.0  # how long a scheduler may take to greet a new connection
MAX_HANDSHAKE_BYTES = 1 << 20  # a scheduler's handshake is ~100 bytes of msgpack
NO_WORKER_S = 60.0  # default: seconds without a live worker before the sweep gives up


class ClusterLost(RuntimeError):
    """The cluster had no live worker (or no scheduler) for too long: the sweep stopped, its rows are kept."""


def check_address(address: str) -> None:
    if not address.strip():
        raise ConfigError("command line", "--dask", "an empty address", "the address of a running dask scheduler, "
                          "tcp://HOST:PORT")


def connect(address: str):
    """A Client of the scheduler at `address`; a mistake or a wrong peer is one ConfigError."""
    check_address(address)
    try:
        from dask.distributed import Client
    except ImportError:
        raise ConfigError("--dask", address, "dask.distributed is not installed",
                          "pip install 'specsim[dask]'") from None
    probe(address)
    try:
        return Client(address, timeout="10s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise ConfigError("--dask", address, f"cannot reach the scheduler: {' '.join(str(exc).split())}",
                          "the address of a running dask scheduler, tcp://HOST:PORT") from None


def probe(address: str, timeout_s: float = PROBE_S) -> None:
    """Refuse a tcp:// address (or HOST:PORT) whose peer does not greet like a Dask scheduler."""
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    if parts.scheme != "tcp":
        return  # tls, inproc, ucx: left to distributed
    allowed = "the address of a running dask scheduler, tcp://HOST:PORT"
    try:
        host, port = parts.hostname or "127.0.0.1", parts.port
    except ValueError:
        port = None
    if port is None:
        raise ConfigError("--dask", address, "no port in the address", allowed)
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            head = _read(sock, 8)
            size = struct.unpack("<Q", head)[0] if len(head) == 8 else None
            if size is None or not 0 < size <= MAX_HANDSHAKE_BYTES or len(_read(sock, size)) != size:
                raise ConfigError("--dask", address, f"answered {head[:16]!r}, not a Dask scheduler's handshake",
                                  allowed)
    except socket.timeout:
        raise ConfigError("--dask", address, f"said nothing within {timeout_s:g} s: not a Dask scheduler",
                          allowed) from None
    except OSError as exc:
        raise ConfigError("--dask", address, f"cannot reach the scheduler: {exc.strerror or exc}", allowed) from None


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        piece = sock.recv(n - len(data))
        if not piece:
            break
        data += piece
    return data


def capacity(client) -> int:
    return max(1, sum(client.nthreads().values()))


def run_tasks(client, function: Callable[[Any], Any], tasks: Iterator[Any], no_worker_s: float | None = None
              ) -> Iterator[tuple[Any, Any]]:
    """Yield (task, function(task)) from the cluster as tasks finish, or (task, exc) for a task the cluster lost;
    raise ClusterLost after `no_worker_s` seconds (default NO_WORKER_S) without a live worker."""
    from dask.distributed import wait

    limit_s = NO_WORKER_S if no_worker_s is None else no_worker_s
    window = 4 * capacity(client)
    pending: dict[Any, Any] = {}  # future -> task
    lonely_since = None
    try:
        while True:
            while len(pending) < window:
                task = next(tasks, None)
                if task is None:
                    break
                pending[client.submit(function, task, pure=False)] = task
            if not pending:
                return
            try:
                done = wait(list(pending), timeout=1.0, return_when="FIRST_COMPLETED").done
            except TimeoutError:
                done = set()
            for future in done:
                task = pending.pop(future)
                try:
                    yield task, future.result()
                except Exception as exc:  # the cluster lost the task: its points become error rows
                    yield task, exc
            try:
                workers = len(client.nthreads())
            except OSError:
                workers = 0
            now = time.monotonic()
            lonely_since = None if workers else (lonely_since or now)
            if lonely_since is not None and now - lonely_since >= limit_s:
                raise ClusterLost(f"the Dask cluster at {client.scheduler.address} has had no live worker for "
                                  f"{limit_s:g} s")
    finally:
        client.cancel(list(pending))
