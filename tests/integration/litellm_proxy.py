"""A real litellm proxy process on 127.0.0.1, started from a config.yaml, for tests and benchmarks.

The proxy takes ~20 s of CPU to start (a minute or more on a loaded machine), so callers start several at once (`start_proxies`)
and keep them for a whole module or benchmark. Its environment gets
``LITELLM_LOCAL_MODEL_COST_MAP=True`` (nothing fetched at import) and whatever the
config's ``os.environ/...`` references need; the repository root is on ``PYTHONPATH`` so
``providers.proxy_hook`` imports in the proxy as it would from an installed package.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx

from tests.sessions.pg_server import free_port

ROOT = Path(__file__).resolve().parents[2]
"""The repository root."""
EXAMPLE_CONFIG = ROOT / "examples" / "proxy" / "config.yaml"
"""The proxy config a team would use; the tests run the proxy from it."""
MASTER_KEY = "sk-harness-test-master"
"""The proxy's master key in tests (the proxy refuses to start without one)."""


class ProxyProcess:
    """One ``litellm --config CONFIG`` process on a free loopback port.

    Args:
        config: the proxy's config.yaml.
        env: environment variables added to this process's own.
        name: a label for error messages and the log file.
    """

    def __init__(self, config: Path, *, env: Mapping[str, str], name: str = "proxy") -> None:
        self.config = config
        self.name = name
        self.port = free_port()
        self.workdir = Path(tempfile.mkdtemp(prefix=f"harness-{name}-"))
        self.log_path = self.workdir / "proxy.log"
        self.env = {
            **os.environ,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_MASTER_KEY": MASTER_KEY,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Launch the process (do not wait for it: `wait_ready` does)."""
        litellm = Path(sys.executable).with_name("litellm")
        command = [str(litellm), "--config", str(self.config)]
        command += ["--host", "127.0.0.1", "--port", str(self.port), "--num_workers", "1"]
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                command, cwd=self.workdir, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )

    def wait_ready(self, timeout: float = 300.0) -> None:
        """Return once the proxy answers its liveness probe.

        Raises:
            RuntimeError: the process exited or did not answer in ``timeout`` s (with its log).
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                raise RuntimeError(f"{self.name} exited during start:\n{self.log()}")
            try:
                if httpx.get(f"{self.base_url}/health/liveliness", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"{self.name} did not start in {timeout:.0f} s:\n{self.log()}")

    def log(self, tail: int = 6_000) -> str:
        """Return the end of the process's output."""
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the process (terminate, then kill after 10 s) and remove its folder."""
        process, self._process = self._process, None
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_proxies(proxies: Sequence[ProxyProcess], timeout: float = 300.0) -> None:
    """Start ``proxies`` together and wait for all; stop every one if any fails."""
    try:
        for proxy in proxies:
            proxy.start()
        for proxy in proxies:
            proxy.wait_ready(timeout)
    except BaseException:
        for proxy in proxies:
            proxy.stop()
        raise
