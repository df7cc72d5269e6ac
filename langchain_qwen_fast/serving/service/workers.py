"""``qwen-fast api``'s launch: one process, or several serving one port.

With ``workers`` > 1 the processes are uvicorn's workers (spawned, one listening socket). Each
builds its own classifier and app from what the parent hands it whole: the saved classifier's
path, its overrides and the :class:`ServiceOptions`, as JSON in the environment the workers
inherit (only this user's processes can read another's environment; the key is on no command
line)."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from langchain_qwen_fast.engine import EngineClassifier
from langchain_qwen_fast.serving.service.app import create_app, missing_api_extra
from langchain_qwen_fast.serving.service.metrics import METRICS_DIR
from langchain_qwen_fast.serving.service.micro_batcher import default_groups_in_flight
from langchain_qwen_fast.serving.service.options import ServiceOptions

logger = logging.getLogger(__name__)

#: The environment variable that hands :func:`serve_api`'s plan to its worker processes.
WORKER_PLAN = "QWEN_FAST_API_WORKER_PLAN"


@dataclasses.dataclass(frozen=True)
class WorkerPlan:
    """What each worker process builds its app from: the saved classifier, its overrides
    (``base_url``, ``model``) and the service's options."""

    config: str
    overrides: dict[str, Any]
    options: ServiceOptions

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerPlan:
        plan = json.loads(text)
        return cls(plan["config"], plan["overrides"], ServiceOptions(**plan["options"]))

    def app(self) -> Any:
        """The application this plan describes, its process's start-up objects then moved out
        of the cyclic garbage collector's sight (:func:`~langchain_qwen_fast.process.freeze_start_up`):
        they live as long as the process, and the classifier's tokenizer alone makes every full
        collection a walk over a large graph, which under load the many short-lived objects of a
        request set off again and again. The worker process is the service's own."""
        from langchain_qwen_fast.process import freeze_start_up

        app = create_app(EngineClassifier.load(self.config, **self.overrides), self.options)
        freeze_start_up()
        return app


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a name: it may resolve to any address
        return False


def serve_api(
    config: str | Path,
    options: ServiceOptions | None = None,
    *,
    base_url: str | list[str] | None = None,
    model: str | None = None,
) -> None:
    """Serve the classifier saved at ``config`` (``QwenClassifier.save``'s file or directory)
    over HTTP in the foreground until interrupted, under ``options``. ``base_url`` and
    ``model`` override the saved server(s) and served model name. Binding an address other
    than loopback without a key is logged as a warning.

    ``options.workers`` > 1 serves the port from that many processes (uvicorn's workers, one
    listening socket): each parses, groups and answers its own clients' requests with its own
    classifier, so the service's HTTP and JSON work is spread over as many cores. By default
    the workers share one process's groups in flight (at least one each), so that more workers
    do not make every group smaller; each has its own line of ``max_queued_texts``.
    ``/metrics`` then sums every worker's counts (prometheus-client's multiprocess mode)."""
    options = options or ServiceOptions()
    uvicorn = import_uvicorn()
    if options.api_key is None and not is_loopback(options.host):
        logger.warning(
            "serving on %s without an API key: anyone who reaches the address can classify and read /metrics "
            "(set QWEN_FAST_API_KEY or --api-key-file)",
            options.host,
        )
    overrides: dict[str, Any] = {}
    if base_url is not None:
        overrides["base_url"] = base_url
    if model is not None:
        overrides["model"] = model
    plan = WorkerPlan(str(config), overrides, options)
    if options.workers == 1:
        uvicorn.run(plan.app(), host=options.host, port=options.port, log_level="warning")
        return
    loaded = EngineClassifier.load(config, **overrides)  # a bad configuration fails here, not in each worker
    if options.groups_in_flight is None:  # each worker's share of what one process would keep in flight
        shared = default_groups_in_flight(loaded.engine.replica_count, options.workers)
        plan = dataclasses.replace(plan, options=dataclasses.replace(options, groups_in_flight=shared))
    with tempfile.TemporaryDirectory(prefix="qwen-fast-metrics-") as metrics:
        os.environ[WORKER_PLAN] = plan.to_json()
        os.environ[METRICS_DIR] = metrics
        try:
            uvicorn.run(f"{__name__}:app_from_environment", factory=True, workers=options.workers,
                        host=options.host, port=options.port, log_level="warning")  # fmt: skip
        finally:
            del os.environ[WORKER_PLAN], os.environ[METRICS_DIR]


def app_from_environment() -> Any:
    """A worker process's application (see :func:`serve_api`): the plan its parent left in
    the environment."""
    return WorkerPlan.from_json(os.environ[WORKER_PLAN]).app()


def import_uvicorn() -> Any:
    """uvicorn, or the error that names the ``api`` extra."""
    try:
        import uvicorn
    except ImportError as exc:
        raise missing_api_extra(exc) from exc
    return uvicorn


__all__ = ["WorkerPlan", "app_from_environment", "import_uvicorn", "is_loopback", "serve_api"]
