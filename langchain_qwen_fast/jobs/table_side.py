"""A job's table side: reading its input and committing its chunks, apart from the classifying.

    from langchain_qwen_fast.jobs.table_side import TableSide, open_tables

    tables = open_tables(TableSide(rows, start, commit))
    if await tables.any_left():
        chunk = await tables.read(1024)          # a ReadChunk, or None at the end
        await tables.commit(chunk.start, results)
    tables.close()

Reading a row (parsing, digesting) and writing one (rendering, counting, syncing) is Python
work that holds the interpreter's lock, so a thread gives the event loop that drives the
classifier no time back. On Linux the table side therefore runs in a process of its own, forked
from the job's once its input is open and its first rows read (:class:`ForkedTables`): the
job's process sends it requests over a pipe and gets, per chunk, only the values to classify
and the rows' places; it sends back each chunk's results packed as lists (:func:`pack`), which
cost little to pickle and unpickle: a chunk classified without error as a list per field
(:class:`~.columns.ClassifiedColumns`, counted and written a column at a time), any other as
a tuple a row. Elsewhere the same
:class:`TableSide` runs in the job's process (:class:`LocalTables`).

Every reply comes in the order of the requests, one per request. The job asks for chunks ahead
of those being classified and sends commits without waiting for them, each within a bound
(``READ_AHEAD``, ``COMMITS_AHEAD`` in :mod:`.job`): the table process holds the rows of the
chunks in flight, read ahead and on their way to be committed, never more. Told to stop, it
still does the commits sent before. A failure on the table side (a row
that differs from a resumed job's, a file that cannot be written) comes back as the exception
it raised; a table process that ends without a word is a :class:`DataFileError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import pickle
import queue
import select
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Protocol, cast

from langchain_qwen_fast.classification import Classification
from langchain_qwen_fast.errors import CarriedError, DataFileError
from langchain_qwen_fast.jobs.columns import ClassifiedColumns, ClassifiedRow, error_text
from langchain_qwen_fast.jobs.summary import error_kind
from langchain_qwen_fast.jobs.tables import InputRow
from langchain_qwen_fast.process import freeze_after_fork, resume_after_fork

if TYPE_CHECKING:
    from langchain_qwen_fast.jobs.answerers import Result

#: How long the job waits for its table process to end once told to, before killing it (it
#: may be committing a chunk).
STOP_SECONDS = 60.0
#: The pipes' buffer, asked of the kernel, so that sending a chunk's results seldom waits for
#: the other side to read.
PIPE_BYTES = 1 << 20
#: How much lower the table process's scheduling priority is than the job's process's.
TABLE_PROCESS_NICENESS = 10
#: Requests the table process holds taken and not yet answered: the job has at most its chunks
#: read ahead and its commits on their way outstanding, so this bound is never reached.
MAX_REQUESTS = 16


@dataclass
class ReadChunk:
    """One chunk as the classifying side sees it: its first row, each row's place (for
    messages), the values of its readable rows in order, and the message of each row that
    cannot be read (by its offset in the chunk)."""

    start: int
    places: list[str]
    texts: list[Any]
    problems: dict[int, str]

    def __len__(self) -> int:
        return len(self.places)


class TableSide:
    """The rows of a job still to classify, and how a chunk of them is committed: ``commit``
    gets the chunk's first row, its input rows and their results."""

    def __init__(
        self, rows: Iterator[InputRow], start: int, commit: Callable[[int, list[InputRow], Sequence[Result]], None]
    ) -> None:
        self._rows = rows
        self._at = start
        self._commit = commit
        self._next: InputRow | None = None
        #: the rows of each chunk read and not yet committed, by its first row
        self._chunks: dict[int, list[InputRow]] = {}

    def any_left(self) -> bool:
        """Whether a row is left to read (reading it ahead)."""
        if self._next is None:
            self._next = next(self._rows, None)
        return self._next is not None

    def read(self, size: int) -> ReadChunk | None:
        """The next chunk of up to ``size`` rows; None at the end of the input."""
        rows: list[InputRow] = []
        if self._next is not None:
            rows.append(self._next)
            self._next = None
        for row in self._rows:
            rows.append(row)
            if len(rows) >= size:
                break
        if not rows:
            return None
        start = self._at
        self._at += len(rows)
        self._chunks[start] = rows
        places, texts, problems = [], [], {}
        for offset, row in enumerate(rows):
            places.append(row.place)
            if row.problem is None:
                texts.append(row.text)
            else:
                problems[offset] = f"{row.place} {row.problem}"
        return ReadChunk(start, places, texts, problems)

    def commit(self, start: int, results: Sequence[Result]) -> None:
        """Commit the chunk read from row ``start`` with its rows' results."""
        self._commit(start, self._chunks.pop(start), results)

    def drop(self) -> None:
        """Forget the chunks read and not committed (the job stops)."""
        self._chunks.clear()


class Tables(Protocol):
    """A :class:`TableSide` as the job's event loop drives it. :meth:`read` and :meth:`commit`
    ask at once (a chunk read ahead is asked for before it is awaited, a commit is confirmed
    while the next chunk is classified); they are answered in the order asked."""

    async def any_left(self) -> bool: ...

    def read(self, size: int) -> asyncio.Future[ReadChunk | None]: ...

    def commit(self, start: int, results: list[Result]) -> asyncio.Future[None]: ...

    def close(self) -> None:
        """Stop the table side once the commits sent are done (no more replies are read)."""

    def reap(self) -> None:
        """Wait for the stopped table side to end (before the job's work folder is let go)."""


def forks() -> bool:
    """Whether the table side runs in a process of its own here: on Linux, where forking a
    process that has threads is safe for what the table side does."""
    return sys.platform.startswith("linux") and hasattr(os, "fork")


def open_tables(side: TableSide, *, forked: bool | None = None) -> Tables:
    """``side`` in a process of its own (``forked``; default: :func:`forks`), else in this one;
    called from the job's event loop."""
    if forked if forked is not None else forks():
        try:
            return ForkedTables(side)
        except OSError:  # no process to be had (a limit, memory): the job's process does it all
            pass
    return LocalTables(side)


class LocalTables:
    """The table side in the job's process: reading in the event loop, committing in a thread
    of its own, one chunk after the other."""

    def __init__(self, side: TableSide) -> None:
        self.side = side
        self._committer = ThreadPoolExecutor(1, thread_name_prefix="qwen-fast-commit")

    async def any_left(self) -> bool:
        return self.side.any_left()

    def read(self, size: int) -> asyncio.Future[ReadChunk | None]:
        future: asyncio.Future[ReadChunk | None] = asyncio.get_running_loop().create_future()
        try:
            future.set_result(self.side.read(size))
        except Exception as exc:
            future.set_exception(exc)
        return future

    def commit(self, start: int, results: list[Result]) -> asyncio.Future[None]:
        return asyncio.get_running_loop().run_in_executor(self._committer, self.side.commit, start, results)

    def close(self) -> None:
        """Nothing to stop: the commits sent end in :meth:`reap`."""

    def reap(self) -> None:
        """Wait for the commits sent, then forget the chunks read and not committed."""
        self._committer.shutdown(wait=True)
        self.side.drop()


# -- results across the pipe ----------------------------------------------------------------
def pack(results: Sequence[Result]) -> Any:
    """Results as the pipe carries them cheaply: a chunk of classifications alone (of one
    ``multi_label``) as their :class:`ClassifiedColumns`; else each classification as a tuple of
    its fields, an error as a :class:`CarriedError` of its kind and text (any error pickles so),
    anything else (a questions job's outcomes) as it is."""
    if set(map(type, results)) == {Classification}:
        multi = set(map(_MULTI_LABEL, results))
        if len(multi) == 1:
            return ClassifiedColumns.of(cast("Sequence[Classification]", results), multi.pop())
    return [
        (r.label, r.labels, r.scores, r.abstained, r.multi_label) if r.__class__ is Classification else _carried(r)
        for r in results
    ]


_MULTI_LABEL = attrgetter("multi_label")


def _carried(result: Any) -> Any:
    if isinstance(result, BaseException):
        return CarriedError(error_kind(result), error_text(result))
    return result


def unpack(packed: Any) -> Sequence[Result]:
    """:func:`pack`'s results back: the :class:`ClassifiedColumns` as they came, else a list of
    each row's (a classification as an object with its fields)."""
    if isinstance(packed, ClassifiedColumns):
        return cast("Sequence[Result]", packed)
    return [cast("Result", ClassifiedRow(*r)) if r.__class__ is tuple else r for r in packed]


# -- the table process ----------------------------------------------------------------------
class ForkedTables:
    """The table side in a forked process, driven over two pipes (see the module docstring)."""

    def __init__(self, side: TableSide) -> None:
        self.loop = asyncio.get_running_loop()
        inbox, to_child = Pipe(duplex=False)
        from_child, outbox = Pipe(duplex=False)
        for conn in (to_child, outbox):
            _widen(conn)
        for stream in (sys.stdout, sys.stderr):  # else the child could write what is buffered again
            with contextlib.suppress(Exception):
                stream.flush()
        try:
            self.pid = os.fork()
        except OSError:
            for conn in (inbox, to_child, from_child, outbox):
                conn.close()
            raise
        if self.pid == 0:  # the table process
            code = 1
            try:
                to_child.close()
                from_child.close()
                code = _serve(side, inbox, outbox)
            finally:
                os._exit(code)
        inbox.close()
        outbox.close()
        self._send_conn = to_child
        self._recv_conn = from_child
        self._waiting: deque[asyncio.Future[Any]] = deque()
        self._failure: BaseException | None = None
        self._exit: int | None = None
        # One poll object for the replies' pipe, kept: the connection's own poll makes a new
        # selector at every call, and the job asks whether a reply is left after each one.
        self._replies = select.poll()
        self._replies.register(from_child.fileno(), select.POLLIN)
        self.loop.add_reader(from_child.fileno(), self._on_reply)

    async def any_left(self) -> bool:
        return bool(await self._ask(("any",)))

    def read(self, size: int) -> asyncio.Future[ReadChunk | None]:
        return self._ask(("read", size))

    def commit(self, start: int, results: list[Result]) -> asyncio.Future[None]:
        return self._ask(("commit", start, pack(results)))

    def _ask(self, request: tuple[Any, ...]) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = self.loop.create_future()
        if self._failure is not None:
            future.set_exception(self._failure)
            return future
        if self._send_conn.closed:
            future.set_exception(DataFileError("the job's table process was stopped"))
            return future
        with contextlib.suppress(OSError):  # the table process is gone: its reply (or its end) says why
            self._send_conn.send(request)
        self._waiting.append(future)
        return future

    def _on_reply(self) -> None:
        try:
            while self._replies.poll(0):
                status, value = self._recv_conn.recv()
                future = self._waiting.popleft()
                if status == "ok":
                    if not future.done():
                        future.set_result(value)
                else:
                    self._fail(value, future)
        except (EOFError, OSError):
            self._fail(DataFileError(f"the job's table process (pid {self.pid}) ended unexpectedly"))

    def _fail(self, error: BaseException, first: asyncio.Future[Any] | None = None) -> None:
        """Every request waiting, and every later one, fails with ``error``."""
        self.loop.remove_reader(self._recv_conn.fileno())
        self._failure = error
        for future in [*([first] if first is not None else []), *self._waiting]:
            if not future.done():
                future.set_exception(error)
                future.exception()  # retrieved: the job raises the first it awaits
        self._waiting.clear()

    def close(self) -> None:
        """Tell the table process to end once the commits sent are done. The replies still to
        come are not read: it does no other request once it finds that out."""
        if self._send_conn.closed:
            return
        if self._failure is None:
            self.loop.remove_reader(self._recv_conn.fileno())
        with contextlib.suppress(OSError):
            self._send_conn.send(("stop",))
        self._send_conn.close()
        self._recv_conn.close()

    def reap(self) -> None:
        """Wait for the table process to end (killing it past :data:`STOP_SECONDS`)."""
        self.close()
        if self._exit is None:
            self._exit = _wait(self.pid, STOP_SECONDS)


def _widen(conn: Connection) -> None:
    with contextlib.suppress(OSError, AttributeError):  # a kernel that says no keeps its default
        fcntl.fcntl(conn.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)


def _wait(pid: int, seconds: float) -> int:
    """The process's exit status, waited for up to ``seconds``, then killed."""
    deadline = time.monotonic() + seconds
    with contextlib.suppress(OSError, AttributeError):  # a kernel without process fds: polled
        handle = os.pidfd_open(pid)
        try:
            select.select([handle], [], [], seconds)
        finally:
            os.close(handle)
    delay = 0.0005
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            return os.waitstatus_to_exitcode(status)
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _serve(side: TableSide, inbox: Connection, outbox: Connection) -> int:
    """The table process: answer each request in turn until told to stop, the job's end of the
    pipe closes, or a request fails (its error is the last reply)."""
    # Ctrl-C reaches the whole process group, and a service manager's SIGTERM may too: the job
    # stops this process itself, once the commits it sent are done (this process's own
    # dispositions, not those of the application that forked it).
    for stop in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop, signal.SIG_IGN)
    # The job's process sets the servers' pace; this one has time to spare. Where the two
    # share too few cores, the scheduler gives the job's the first turn.
    with contextlib.suppress(OSError):
        os.nice(TABLE_PROCESS_NICENESS)
    with contextlib.suppress(ValueError):
        signal.set_wakeup_fd(-1)
    # forked while the command's pause is held: this process collects as the application set it
    resume_after_fork()
    freeze_after_fork()  # what the job's process holds is no garbage of this one
    # The requests are taken in a thread of their own, so that the job's next request is read
    # while a reply is sent: read only between replies, a reply and a request each larger than
    # its pipe would wait on each other for good (the job sends a chunk's results while the
    # chunk read ahead comes back).
    requests: queue.Queue[tuple[Any, ...] | None] = queue.Queue(MAX_REQUESTS)
    threading.Thread(target=_take_requests, args=(inbox, requests), daemon=True).start()
    replying = True
    while True:
        request = requests.get()
        if request is None:  # the job's end of the pipe closed
            return 0
        op = request[0]
        if op == "stop":
            return 0
        if not replying and op != "commit":
            continue  # the job stopped reading replies: only the commits it sent are still done
        try:
            if op == "any":
                reply: Any = side.any_left()
            elif op == "read":
                reply = side.read(request[1])
            else:
                side.commit(request[1], unpack(request[2]))
                reply = None
        except BaseException as exc:
            if replying:
                with contextlib.suppress(OSError):
                    outbox.send(("error", _sendable(exc)))
            return 1
        if replying:
            try:
                outbox.send(("ok", reply))
            except OSError:
                replying = False


def _take_requests(inbox: Connection, requests: queue.Queue[tuple[Any, ...] | None]) -> None:
    """Put each request from the job into ``requests`` as it comes; None once the pipe closes."""
    while True:
        try:
            request = inbox.recv()
        except (EOFError, OSError):
            requests.put(None)
            return
        requests.put(request)
        if request[0] == "stop":
            return


def _sendable(error: BaseException) -> BaseException:
    """``error``, or where it does not survive pickling, a :class:`DataFileError` of its text."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return DataFileError(error_text(error))
    return error
