"""Running a Spark job's entry script on the host, as the local Glue and the local EMR Serverless both do:
its files downloaded from the local S3, the project's Python, the job's arguments with the local overrides,
its own process group (a stop or a timeout kills the script and its Spark JVM), stdout and stderr kept.

By default a script the project's Python would run goes to a warm worker instead (`WarmPool`, spark_worker.py:
a Python with a running, JIT-warm Spark JVM that runs one script after another); `LOCALAWS_WARM_SPARK=0`
starts a process per run. Both look alike to the providers: a handle with `poll`, `wait`, `terminate` and
`signal_group`/`kill_group` here, and a stop or a timeout kills the worker's process group.

No LocalStack import here: the pure parts are unit-tested with the project's Python.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from localaws_plugin import settings

ERROR_MESSAGE_LINES = 12
WORKER_SCRIPT = Path(__file__).resolve().parent / "spark_worker.py"

LOG = logging.getLogger(__name__)


def local_overrides(arguments: dict[str, str] | set[str]) -> dict[str, str]:
    """The arguments every local run gets over the deployed ones: a hadoop catalog in the local warehouse
    (the Glue Data Catalog is not emulated) and S3 inputs staged through the local S3."""
    overrides = {
        "--catalog_type": "hadoop",
        "--warehouse": settings.warehouse(),
        "--s3_endpoint_url": settings.endpoint_url(),
    }
    if "--refined_location" in arguments:  # the hadoop catalog rejects a custom table location
        overrides["--refined_location"] = ""  # empty: the refine job's catalog default
    return overrides


def error_message_from_stderr(stderr_text: str, returncode: int) -> str:
    lines = [line for line in stderr_text.splitlines() if line.strip()]
    tail = "\n".join(lines[-ERROR_MESSAGE_LINES:])
    return tail[-4000:] or f"script exited with status {returncode}"


def s3_client(region: str, account_id: str) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=settings.endpoint_url(),
        region_name=region,
        aws_access_key_id=account_id,
        aws_secret_access_key="test",
    )


def download(s3: Any, uri: str, target_dir: Path) -> Path:
    """A script or library named by an s3:// URI, fetched into `target_dir` (a local path is used as is)."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return Path(parsed.path)
    if parsed.scheme not in ("s3", "s3a"):
        raise ValueError(f"unsupported script location {uri}")
    target = target_dir / Path(parsed.path).name
    s3.download_file(parsed.netloc, parsed.path.lstrip("/"), str(target))
    return target


def script_environment(
    region: str, account_id: str, python_path: list[str], extra: dict[str, str]
) -> dict[str, str]:
    """The environment of a job script: the local AWS as its endpoint, its libraries on PYTHONPATH."""
    env = settings.host_process_base_env()
    env.update(
        {
            "AWS_ENDPOINT_URL": settings.endpoint_url(),
            "AWS_ACCESS_KEY_ID": account_id,
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": region,
            "AWS_REGION": region,
            "PYTHONPATH": ":".join(python_path),
            "PYSPARK_PYTHON": settings.host_python(),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


def start_script(command: list[str], run_dir: Path, env: dict[str, str]) -> Any:
    """Start `command` (`python script args…`), stdout and stderr into `run_dir`: on a warm worker when the
    command is the project's Python and warm workers are on, else in its own session (process group)."""
    if settings.warm_spark() and len(command) >= 2 and command[0] == settings.host_python():
        python_path = [p for p in env.get("PYTHONPATH", "").split(":") if p]
        warm = warm_pool().run(command[1], command[2:], run_dir, env, python_path)
        if warm is not None:
            return warm
    return start_process(command, run_dir, env)


def start_process(command: list[str], run_dir: Path, env: dict[str, str]) -> subprocess.Popen:
    """Start `command` in its own session (process group), stdout and stderr into `run_dir`."""
    with (run_dir / "stdout.log").open("wb") as out, (run_dir / "stderr.log").open("wb") as err:
        return subprocess.Popen(
            command,
            cwd=run_dir,
            env=env,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def signal_group(process: Any, signal_number: int = signal.SIGKILL) -> None:
    """Signal the script and its Spark JVM (the process group start_script made), if still there; a warm
    run's worker only while it still runs that run."""
    if isinstance(process, WarmRun):
        process.signal_group(signal_number)
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal_number)


def kill_group(process: Any) -> None:
    signal_group(process)
    process.wait()


class _Worker:
    """One spark_worker.py process (its own process group, with its JVM)."""

    _numbers = itertools.count(1)

    def __init__(
        self, python: str, library: str, log_dir: Path, env: dict[str, str], warm_up: bool = True
    ) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_file = log_dir / f"worker-{os.getpid()}-{next(self._numbers)}.log"
        options = [] if warm_up else ["--no-warm-up"]
        with self.log_file.open("ab") as log:
            self.process = subprocess.Popen(
                [python, str(WORKER_SCRIPT), "--library", library, *options],
                cwd=log_dir,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
            )
        self.runs = 0
        self.signalled = False  # a stop or a timeout reached it: never reused
        self.ready = threading.Event()  # warmed up: its JVM is up
        self._answers: queue.Queue[int | None] = queue.Queue()
        threading.Thread(target=self._read, name=f"warm-worker-{self.process.pid}", daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        with contextlib.suppress(OSError, ValueError):
            for line in self.process.stdout:
                message = json.loads(line)
                if message.get("ready"):
                    self.ready.set()
                elif "returncode" in message:
                    self._answers.put(int(message["returncode"]))
        self._answers.put(None)  # the worker ended

    def alive(self) -> bool:
        return self.process.poll() is None

    def send(self, request: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write((json.dumps(request) + "\n").encode())
        self.process.stdin.flush()

    def answer(self) -> int | None:
        """The run's exit status once the worker answers; None if the worker ended first."""
        return self._answers.get()

    def kill(self, signal_number: int = signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal_number)

    def close(self) -> None:
        self.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):
                stream.close()  # type: ignore[union-attr]


class WarmRun:
    """One script run on a warm worker, handled like the process of a cold run (poll, wait, terminate)."""

    def __init__(self, pool: WarmPool, worker: _Worker, command: list[str]) -> None:
        self.pool = pool
        self.worker = worker
        self.args = command
        self.pid = worker.process.pid
        self.returncode: int | None = None
        self._attached = True  # the worker runs this run: a signal may reach it
        self._done = threading.Event()
        self._lock = threading.Lock()

    def start(self, request: dict[str, Any]) -> None:
        self.worker.send(request)
        threading.Thread(target=self._follow, name=f"warm-run-{self.pid}", daemon=True).start()

    def _follow(self) -> None:
        answer = self.worker.answer()
        with self._lock:
            self._attached = False
            if answer is not None and not self.worker.signalled:
                self.returncode = answer
                self.pool.release(self.worker)
            else:
                self.worker.close()
                self.returncode = self.worker.process.returncode if answer is None else answer
                self.pool.discard(self.worker)
        self._done.set()

    def poll(self) -> int | None:
        return self.returncode if self._done.is_set() else None

    def wait(self, timeout: float | None = None) -> int:
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def signal_group(self, signal_number: int = signal.SIGKILL) -> None:
        """Signal the worker and its JVM while they run this run (the worker is not reused afterwards)."""
        with self._lock:
            if self._attached:
                self.worker.signalled = True
                self.worker.kill(signal_number)

    def terminate(self) -> None:
        self.signal_group(signal.SIGTERM)

    def kill(self) -> None:
        self.signal_group(signal.SIGKILL)


class WarmPool:
    """Warm workers shared by the local Glue and EMR Serverless: `size` of them kept (busy and idle together,
    started ahead so that they are warm when a run comes); more start while more runs overlap and end after
    them; a worker ends after `runs_per_worker` runs, when a run on it is stopped or times out, or when it
    dies (its run fails with the worker's exit status)."""

    def __init__(
        self,
        python: str,
        library: str,
        log_dir: Path,
        env: dict[str, str],
        size: int,
        runs_per_worker: int,
        warm_up: bool = True,
    ) -> None:
        self.python, self.library, self.log_dir, self.env = python, library, log_dir, env
        self.size, self.runs_per_worker, self.warm_up = size, runs_per_worker, warm_up
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._lock = threading.Lock()
        self._closed = False
        self.replenish()

    def _spawn(self) -> _Worker:
        worker = _Worker(self.python, self.library, self.log_dir, self.env, self.warm_up)
        LOG.info("warm Spark worker %s started (log %s)", worker.process.pid, worker.log_file)
        return worker

    def replenish(self) -> None:
        """Start workers until `size` exist (each warms up on its own, in the background)."""
        with self._lock:
            while not self._closed and len(self._idle) + len(self._busy) < self.size:
                self._idle.append(self._spawn())

    def _take(self) -> _Worker | None:
        """An idle worker that is warm, if there is one (while the workers warm up, runs start cold)."""
        with self._lock:
            if self._closed:
                return None
            for dead in [w for w in self._idle if not w.alive()]:
                self._idle.remove(dead)  # ended while idle (idle timeout, or killed)
                dead.close()
            worker = next((w for w in self._idle if w.ready.is_set()), None)
            if worker is not None:
                self._idle.remove(worker)
                self._busy.add(worker)
        self.replenish()
        return worker

    def run(
        self, script: str, argv: list[str], run_dir: Path, env: dict[str, str], python_path: list[str]
    ) -> WarmRun | None:
        """The script run on a warm worker; None when none is warm yet (the caller starts a process)."""
        request = {
            "script": str(script),
            "argv": list(argv),
            "cwd": str(run_dir),
            "env": env,
            "python_path": python_path,
            "stdout": str(run_dir / "stdout.log"),
            "stderr": str(run_dir / "stderr.log"),
        }
        for attempt in range(2):
            worker = self._take()
            if worker is None:
                return None
            worker.runs += 1
            handle = WarmRun(self, worker, [self.python, str(script), *argv])
            try:
                handle.start(request)
            except (BrokenPipeError, ValueError, OSError):
                self.discard(worker)  # it ended between the check and the request: once more, on a new one
                worker.close()
                if attempt:
                    raise
                continue
            LOG.info("run %s on warm Spark worker %s (run %d)", script, worker.process.pid, worker.runs)
            return handle
        raise AssertionError("unreachable")

    def release(self, worker: _Worker) -> None:
        with self._lock:
            self._busy.discard(worker)
            keep = (
                not self._closed
                and worker.runs < self.runs_per_worker
                and len(self._idle) + len(self._busy) < self.size
            )
            if keep:
                self._idle.append(worker)
        if not keep:
            worker.close()
        self.replenish()

    def discard(self, worker: _Worker) -> None:
        with self._lock:
            self._busy.discard(worker)
            if worker in self._idle:
                self._idle.remove(worker)
        self.replenish()

    def wait_warm(self, timeout: float) -> bool:
        """Until an idle worker is warm (True), or `timeout` seconds passed (False)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if any(w.ready.is_set() and w.alive() for w in self._idle):
                    return True
            time.sleep(0.2)
        return False

    def shutdown(self) -> None:
        """Kill every worker (and its JVM), busy or idle."""
        with self._lock:
            self._closed = True
            workers = [*self._idle, *self._busy]
            self._idle.clear()
        for worker in workers:
            worker.kill()


_pool: WarmPool | None = None
_pool_lock = threading.Lock()


def warm_pool() -> WarmPool:
    """The warm workers of this local AWS (started with the first call)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            env = settings.host_process_base_env() | {
                "PYSPARK_PYTHON": settings.host_python(),
                "PYTHONUNBUFFERED": "1",
            }
            _pool = WarmPool(
                settings.host_python(),
                settings.spark_library(),
                settings.state_dir() / "spark-workers",
                env,
                settings.warm_spark_workers(),
                settings.warm_spark_runs_per_worker(),
            )
        return _pool


def start_warm_pool() -> None:
    """Start the warm workers ahead of the first run, if they are on (a provider's start)."""
    if settings.warm_spark():
        warm_pool()


def shutdown_warm_pool() -> None:
    if _pool is not None:
        _pool.shutdown()


def stderr_message(run_dir: Path, returncode: int) -> str:
    return error_message_from_stderr((run_dir / "stderr.log").read_text(errors="replace"), returncode)
