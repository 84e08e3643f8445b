"""Start, stop and check the embedded local AWS (LocalStack in host mode with our plugins).

Usage (from the repo root, with the project's venv):
    python -m localaws.stack up [--no-install]    # installs .venv-localstack when needed, starts, waits healthy
    python -m localaws.stack status
    python -m localaws.stack down

In tests: `with running_stack() as endpoint: ...` starts LocalStack unless one is already healthy on the port
(then it is reused and left running).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from localaws import setup_venv

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 4566


def _default_port() -> int:
    """LOCALAWS_PORT moves the whole local AWS (tests, demo) off 4566, e.g. beside another checkout's run."""
    return int(os.environ.get("LOCALAWS_PORT", DEFAULT_PORT))


@dataclass(frozen=True)
class StackConfig:
    """Where LocalStack listens and keeps its files, and what our plugins run on the host."""

    host: str = DEFAULT_HOST
    port: int = field(default_factory=_default_port)
    # None: var/localstack on the default port, var/localstack-<port> on another, so that two local AWSs on two
    # ports never take each other's pid file for their own.
    state_dir: Path = None  # type: ignore[assignment]
    host_python: Path = REPO_ROOT / ".venv" / "bin" / "python"
    warehouse: Path = REPO_ROOT / "var" / "warehouse" / "clean"
    glue_max_parallel_runs: int = 2
    extra_env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.state_dir is None:
            folder = "localstack" if self.port == DEFAULT_PORT else f"localstack-{self.port}"
            object.__setattr__(self, "state_dir", REPO_ROOT / "var" / folder)

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "localstack.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "localstack.log"

    @property
    def tmp_dir(self) -> Path:
        """LocalStack's TMPDIR: it unzips every Lambda function and layer version it deploys there (a stack's
        libraries layer: 45 MB) and never removes them when it stops; emptied at each start and stop. Its job
        runs and warm Spark workers inherit it (settings.host_process_base_env), so their temporary files go too."""
        return self.state_dir / "tmp"

    def environment(self) -> dict[str, str]:
        """The environment of the LocalStack process: host mode, hypercorn, our plugins and their settings."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
        env.update(
            {
                "OVERRIDE_IN_DOCKER": "0",
                "GATEWAY_SERVER": "hypercorn",
                "GATEWAY_LISTEN": f"{self.host}:{self.port}",
                "FILESYSTEM_ROOT": str(self.state_dir / "filesystem"),
                "TMPDIR": str(self.tmp_dir),
                "LAMBDA_RUNTIME_EXECUTOR": "host",
                "SKIP_SSL_CERT_DOWNLOAD": "1",
                "DISABLE_EVENTS": "1",
                "DNS_ADDRESS": "0",
                "LOCALAWS_HOST_PYTHON": str(self.host_python),
                "LOCALAWS_WAREHOUSE": str(self.warehouse),
                "LOCALAWS_STATE_DIR": str(self.state_dir),
                "LOCALAWS_ENDPOINT_URL": self.endpoint_url,
                "LOCALAWS_GLUE_MAX_PARALLEL_RUNS": str(self.glue_max_parallel_runs),
                "AWS_DEFAULT_REGION": env.get("AWS_DEFAULT_REGION", "us-east-1"),
            }
        )
        env.update(self.extra_env)
        return env


def is_healthy(config: StackConfig, timeout: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(f"{config.endpoint_url}/_localstack/health", timeout=timeout) as response:
            return response.status == 200 and "services" in json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError):
        return False


def read_pid(config: StackConfig) -> int | None:
    try:
        pid = int(config.pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return pid


def start(config: StackConfig | None = None, install: bool = True, timeout: float = 60.0) -> int:
    """Start LocalStack in the background and wait until healthy. Returns its PID (an existing one if running)."""
    config = config or StackConfig()
    if (pid := read_pid(config)) is not None:
        wait_healthy(config, timeout)
        return pid
    if is_healthy(config):
        raise RuntimeError(
            f"something else already serves {config.endpoint_url}; stop it or choose another port"
        )
    venv_python = setup_venv.install() if install else setup_venv.VENV_DIR / "bin" / "python"
    config.state_dir.mkdir(parents=True, exist_ok=True)
    config.warehouse.mkdir(parents=True, exist_ok=True)
    _empty(config.tmp_dir)  # what a killed LocalStack left
    with config.log_file.open("ab") as log:
        process = subprocess.Popen(
            [str(venv_python), "-m", "localstack.runtime.main"],
            env=config.environment(),
            cwd=config.state_dir,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: `down` stops the Lambda and Glue children too
        )
    config.pid_file.write_text(str(process.pid))
    try:
        wait_healthy(config, timeout, process)
    except Exception:
        stop(config)
        raise
    return process.pid


def wait_healthy(config: StackConfig, timeout: float, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if is_healthy(config):
            return
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"LocalStack exited with {process.returncode}; see {config.log_file}")
        time.sleep(0.2)
    raise TimeoutError(f"LocalStack not healthy after {timeout:.0f}s; see {config.log_file}")


def stop(config: StackConfig | None = None, timeout: float = 20.0) -> bool:
    """Stop the LocalStack we started (by PID file). Returns False if none was running."""
    config = config or StackConfig()
    pid = read_pid(config)
    if pid is None:
        config.pid_file.unlink(missing_ok=True)
        shutil.rmtree(config.tmp_dir, ignore_errors=True)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _is_alive(pid):
        time.sleep(0.2)
    if _is_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    config.pid_file.unlink(missing_ok=True)
    shutil.rmtree(config.tmp_dir, ignore_errors=True)
    return True


def _empty(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)


def _is_alive(pid: int) -> bool:
    try:
        waited_pid, _ = os.waitpid(pid, os.WNOHANG)
        if waited_pid == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def status(config: StackConfig | None = None) -> dict[str, object]:
    config = config or StackConfig()
    return {
        "pid": read_pid(config),
        "healthy": is_healthy(config),
        "endpoint_url": config.endpoint_url,
        "log_file": str(config.log_file),
    }


# How long a LocalStack that `running_stack` started may take to stop before it is killed: its state goes with it
# anyway. Its shutdown sometimes hangs after "Stopping all services" (cause not found): on a fresh clone 2 of the
# 3 test sessions' LocalStacks held their session's end to the 20 s kill (2026-11-27), the suite's last seconds.
RUNNING_STACK_STOP_SECONDS = 5.0


@contextlib.contextmanager
def running_stack(config: StackConfig | None = None) -> Iterator[str]:
    """Yield the endpoint URL of a healthy LocalStack; stop it afterwards only if this call started it."""
    config = config or StackConfig()
    already_running = read_pid(config) is not None or is_healthy(config)
    if not already_running:
        start(config)
    try:
        yield config.endpoint_url
    finally:
        if not already_running:
            stop(config, timeout=RUNNING_STACK_STOP_SECONDS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The embedded local AWS (LocalStack on the host)")
    parser.add_argument("command", choices=["up", "down", "status"])
    parser.add_argument("--no-install", action="store_true", help="don't create/update .venv-localstack")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args(argv)
    config = StackConfig(port=args.port)
    if args.command == "up":
        started = time.monotonic()
        pid = start(config, install=not args.no_install)
        print(f"LocalStack up at {config.endpoint_url} (pid {pid}, {time.monotonic() - started:.1f}s)")
        print(f"logs: {config.log_file}")
    elif args.command == "down":
        print("stopped" if stop(config) else "not running")
    else:
        print(json.dumps(status(config), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
