"""NVIDIA's Multi-Process Service (MPS) for the servers of one group."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from langchain_qwen_fast.errors import ServerStartError


class MPSDaemon:
    """A user-level MPS control daemon with its own pipe and log folders (no GPU setting
    changes), so several servers on one GPU run their kernels side by side instead of taking
    turns; what that gains is measured in docs/gpu-deployment.md. The servers join it through
    :attr:`env`."""

    def __init__(self) -> None:
        # Its pipes are Unix sockets: a short path, whatever the group's log folder is.
        root = Path(tempfile.mkdtemp(prefix="qwen-fast-mps-"))
        self.env = {"CUDA_MPS_PIPE_DIRECTORY": str(root / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(root / "log")}
        self.running = False

    def _control(self, *args: str, stdin: str | None = None) -> None:
        control = shutil.which("nvidia-cuda-mps-control")
        if control is None:
            raise ServerStartError("--mps needs nvidia-cuda-mps-control (NVIDIA's driver tools) on the PATH")
        result = subprocess.run(
            [control, *args], input=stdin, env={**os.environ, **self.env}, capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise ServerStartError(f"nvidia-cuda-mps-control {' '.join(args)} failed: {result.stderr.strip()[-500:]}")

    def start(self) -> None:
        """Start the control daemon (the servers started after it join it)."""
        for folder in self.env.values():
            Path(folder).mkdir(parents=True, exist_ok=True)
        self._control("-d")
        self.running = True

    def stop(self) -> None:
        """Ask the daemon to quit once its clients are gone; idempotent."""
        if self.running:
            self.running = False
            with contextlib.suppress(ServerStartError):
                self._control(stdin="quit\n")
