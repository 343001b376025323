"""Work items in worker processes, from wherever the caller runs, ending with the caller at any moment.

    for event in processes.results(work, items, jobs=2, heartbeat=15.0):
        ...  # (index, result) per finished item, None after each heartbeat without one

``work`` must pickle (a module-level function, or a ``functools.partial`` of one). Python's ``spawn`` start method
runs the caller's main script again in every worker, to find its functions: a script that called
:func:`acgate.audit_panel` at its top level, without ``if __name__ == "__main__":``, started the whole audit again in
each worker and died with ``BrokenProcessPool``. So the workers are not the caller's children: the caller starts one
host process, ``python -m acgate.processes``, which runs the pool, and the workers re-import this module, never the
caller's script. A plain script, a notebook, IPython, ``python -c`` and a Papermill kernel are all callers alike.

How every process ends with the caller:

- the host reads its standard input, a pipe from the caller, to its end, and exits when it closes: the caller ended,
  whatever ended it (SIGTERM, SIGKILL, an out-of-memory kill, a notebook kernel restarted);
- each worker checks every :data:`ORPHAN_POLL` seconds that the host is alive (it is told the host's pid, and
  checks before it imports anything), and exits when it is not;
- Ctrl-C (a KeyboardInterrupt in the caller; a terminal's SIGINT, which reaches the whole process group, is ignored
  by the host and the workers) kills the host, so the workers end within :data:`ORPHAN_POLL` seconds, and the
  KeyboardInterrupt goes on up the caller's stack.

The host sends its news through a pipe of its own as pickles: ``("done", index, result)``, ``("running",)`` after a
heartbeat without a result, ``("failed", exception, traceback text)`` and ``("end",)``.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context
from typing import Any

from threadpoolctl import threadpool_limits

ORPHAN_POLL = 1.0  # seconds: how often a worker checks that the host that started it is alive


class WorkersEnded(RuntimeError):
    """The host of the worker processes ended without a word (killed, or out of memory)."""


def results(work: Callable[[Any], Any], items: list, jobs: int, heartbeat: float) -> Iterator[tuple[int, Any] | None]:
    """``work(item)`` of every item of ``items`` in ``jobs`` worker processes (one thread each): yields ``(index,
    result)`` as each finishes, and None after each ``heartbeat`` seconds without one. An exception in ``work``
    is raised here (its worker's traceback as its note), and the other workers end."""
    read, write = os.pipe()
    try:
        host = subprocess.Popen([sys.executable, "-m", "acgate.processes", str(write)], stdin=subprocess.PIPE,
                                pass_fds=(write,))
    finally:
        os.close(write)
    assert host.stdin is not None
    with os.fdopen(read, "rb") as news:
        try:
            try:  # sys.path first: the host needs it to find the modules ``work`` comes from
                pickle.dump(list(sys.path), host.stdin)
                pickle.dump((work, items, jobs, heartbeat), host.stdin)
                host.stdin.flush()
            except BrokenPipeError:
                pass  # the host ended at once: its news (or none) says why
            while True:
                try:
                    message = pickle.load(news)
                except EOFError:
                    code = host.wait()
                    raise WorkersEnded(f"the process running the worker processes ended with exit code {code}"
                                       + (" (killed: out of memory?)" if code == -signal.SIGKILL else "")) from None
                if message[0] == "end":
                    host.stdin.close()
                    host.wait()  # it is ending by itself: killed now, it would leave its pool's semaphores behind
                    break
                if message[0] == "failed":
                    error, text = message[1], message[2]
                    error.add_note(f"in a worker process:\n{text}")
                    raise error
                yield None if message[0] == "running" else (message[1], message[2])
        finally:
            if host.poll() is None:
                host.kill()  # whatever else ends the caller's loop, its workers end too (they watch the host)
                host.wait()
            host.stdin.close()


def in_order(work: Callable[[Any], Any], items: list, jobs: int, label: str, every: int = 20) -> list:
    """The results of ``work(item)`` for every item of ``items`` (:func:`results`), in the items' order; a line
    ``<label>: <done>/<all> (<minutes> min)`` goes to standard output every ``every`` results, at the last, and after
    each minute without one."""
    found: list = [None] * len(items)
    done, start = 0, time.perf_counter()
    for event in results(work, items, jobs, 60.0):
        if event is not None:
            found[event[0]], done = event[1], done + 1
        if event is None or done % every == 0 or done == len(items):
            print(f"{label}: {done}/{len(items)} ({(time.perf_counter() - start) / 60:.1f} min)", flush=True)
    return found


def _start_worker(host: int) -> None:
    """Initializer of every worker: it ends within :data:`ORPHAN_POLL` seconds of ``host``'s end (watched from
    before PyTorch is imported, which takes seconds), ignores a terminal's SIGINT (the caller decides), and runs one
    thread for numpy's BLAS and PyTorch (the pool runs one worker per core; more threads each would oversubscribe
    them, and small fits then run many times slower)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        while os.getppid() == host:
            time.sleep(ORPHAN_POLL)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="die-with-host").start()
    import torch  # here only: a grid that checks its plan imports the modules that use this one without PyTorch

    threadpool_limits(1)
    torch.set_num_threads(1)


def _host(channel: int) -> None:
    """The host: reads the job from standard input, runs it in a pool and sends the news to ``channel``; exits as
    soon as standard input closes (its caller ended)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    job = sys.stdin.buffer
    sys.path[:] = pickle.load(job)
    news = os.fdopen(channel, "wb")

    def send(*message: Any) -> None:
        data = pickle.dumps(message)  # whole, before a byte is sent: a message that cannot pickle sends nothing
        news.write(data)
        news.flush()

    try:
        work, items, jobs, heartbeat = pickle.load(job)
    except Exception as error:  # noqa: BLE001 - anything that stops the job goes back to the caller
        send("failed", error, traceback.format_exc())
        os._exit(1)

    def watch() -> None:
        while job.read(1):
            pass
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="die-with-caller").start()
    with ProcessPoolExecutor(jobs, mp_context=get_context("spawn"), initializer=_start_worker,
                             initargs=(os.getpid(),)) as pool:
        running = {pool.submit(work, item): index for index, item in enumerate(items)}
        while running:
            finished, _ = wait(running, timeout=heartbeat, return_when=FIRST_COMPLETED)
            for future in finished:
                index = running.pop(future)
                failure = future.exception()
                if failure is not None:
                    text = "".join(traceback.format_exception(failure))
                    try:
                        send("failed", failure, text)
                    except (pickle.PicklingError, TypeError, AttributeError):  # an exception that does not pickle
                        send("failed", RuntimeError(f"{type(failure).__name__}: {failure}"), text)
                    os._exit(1)  # the other workers end with the host, not after their queued items
                send("done", index, future.result())
            if not finished:
                send("running")
    send("end")
    # ended here, not by the interpreter's shutdown: the thread that reads standard input holds its lock, and the
    # shutdown would stop with "could not acquire lock for <stdin>" once the caller closes it
    os._exit(0)


if __name__ == "__main__":
    _host(int(sys.argv[1]))
