"""A Lambda runtime executor that runs Python handlers as host processes (no Docker).

Selected with LAMBDA_RUNTIME_EXECUTOR=host. One execution environment = one long-lived process of the
project's Python running `lambda_bootstrap.py` with the function's code dir as task root, so warm invokes
cost no interpreter start, as in AWS.
"""

from __future__ import annotations

import json
import logging
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import IO

from localstack.services.lambda_.invocation.lambda_models import FunctionVersion, InvocationResult
from localstack.services.lambda_.invocation.plugins import RuntimeExecutorPlugin
from localstack.services.lambda_.invocation.runtime_executor import LambdaRuntimeException, RuntimeExecutor

from localaws_plugin import settings

LOG = logging.getLogger(__name__)
BOOTSTRAP = Path(__file__).with_name("lambda_bootstrap.py")
STARTUP_TIMEOUT_SECONDS = 60


def _code_dir(function_version: FunctionVersion) -> Path:
    code = function_version.config.code
    if code is None:
        raise LambdaRuntimeException("container image functions are not supported by the host executor")
    return Path(code.get_unzipped_code_location())


def _layer_dirs(function_version: FunctionVersion) -> list[Path]:
    """Python layers put packages under python/ (or at the top), as /opt/python on AWS."""
    dirs: list[Path] = []
    for layer in function_version.config.layers or []:
        if layer.code is None:
            continue
        root = Path(layer.code.get_unzipped_code_location())
        dirs += [root / "python", root]
    return dirs


class HostRuntimeExecutor(RuntimeExecutor):
    def __init__(self, id: str, function_version: FunctionVersion) -> None:
        super().__init__(id=id, function_version=function_version)
        self._process: subprocess.Popen[str] | None = None
        self._responses: queue.Queue[dict | None] = queue.Queue()
        self._invoke_lock = threading.Lock()
        self._log_path = (
            settings.state_dir() / "lambda" / f"{function_version.id.function_name}-{self.id[:8]}.log"
        )

    def start(self, env_vars: dict[str, str]) -> None:
        runtime = str(self.function_version.config.runtime or "")
        if not runtime.startswith("python"):
            raise LambdaRuntimeException(
                f"runtime {runtime!r} is not supported by the host executor (python only)"
            )
        task_root = _code_dir(self.function_version)
        python_path = [str(task_root), *(str(d) for d in _layer_dirs(self.function_version))]
        env = settings.host_process_base_env()
        env.update({name: str(value) for name, value in env_vars.items()})
        env.update(
            {
                "LAMBDA_TASK_ROOT": str(task_root),
                "PYTHONPATH": ":".join(python_path),
                "PYTHONUNBUFFERED": "1",
                "PYTHONDONTWRITEBYTECODE": "1",
            }
        )
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        log_file = self._log_path.open("a")
        self._process = subprocess.Popen(
            [settings.host_python(), str(BOOTSTRAP)],
            cwd=task_root,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log_file,
            text=True,
            bufsize=1,
        )
        log_file.close()
        threading.Thread(target=self._read_responses, args=(self._process.stdout,), daemon=True).start()
        ready = self._next_response(STARTUP_TIMEOUT_SECONDS)
        if not ready or ready.get("status") != "ready":
            self.stop()
            raise LambdaRuntimeException(f"host Lambda process failed to start; see {self._log_path}")

    def _read_responses(self, stream: IO[str]) -> None:
        for line in stream:
            try:
                self._responses.put(json.loads(line))
            except ValueError:
                LOG.warning("unexpected output of Lambda host process: %s", line.rstrip())
        self._responses.put(None)

    def _next_response(self, timeout: float) -> dict | None:
        try:
            return self._responses.get(timeout=timeout)
        except queue.Empty:
            return None

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def invoke(self, payload: dict[str, str]) -> InvocationResult:
        request_id = payload["invoke-id"]
        timeout_seconds = int(self.function_version.config.timeout)
        message = {
            "request_id": request_id,
            "function_arn": payload["invoked-function-arn"],
            "payload": payload["payload"],
            "trace_id": payload.get("trace-id"),
            "deadline_ms": int(time.time() * 1000) + timeout_seconds * 1000,
        }
        with self._invoke_lock:
            process = self._process
            if process is None or process.poll() is not None:
                raise LambdaRuntimeException("host Lambda process is not running")
            assert process.stdin is not None  # started with stdin=PIPE
            process.stdin.write(json.dumps(message) + "\n")
            process.stdin.flush()
            response = self._next_response(timeout_seconds)
        if response is None:
            # Timed out or the process died: this environment is unusable, as in AWS.
            timed_out = process.poll() is None
            self.stop()
            error = (
                {
                    "errorType": "Sandbox.Timedout",
                    "errorMessage": f"Task timed out after {timeout_seconds}.00 seconds",
                }
                if timed_out
                else {
                    "errorType": "Runtime.ExitError",
                    "errorMessage": "RequestId: "
                    f"{request_id} Error: Runtime exited with error: exit status {process.returncode}",
                }
            )
            return InvocationResult(
                request_id, json.dumps(error).encode(), is_error=True, logs=error["errorMessage"]
            )
        return InvocationResult(
            request_id,
            response["payload"].encode(),
            is_error=bool(response["is_error"]),
            logs=response.get("logs", ""),
        )

    def get_address(self) -> str:
        return "127.0.0.1"

    def get_endpoint_from_executor(self) -> str:
        return "127.0.0.1"

    def get_runtime_endpoint(self) -> str:
        return f"{settings.endpoint_url()}/_localstack_lambda/{self.id}"

    def get_logs(self) -> str:
        try:
            return self._log_path.read_text()[-20000:]
        except FileNotFoundError:
            return ""

    @classmethod
    def prepare_version(cls, function_version: FunctionVersion) -> None:
        if function_version.config.code:
            function_version.config.code.prepare_for_execution()
        for layer in function_version.config.layers or []:
            if layer.code:
                layer.code.prepare_for_execution()

    @classmethod
    def cleanup_version(cls, function_version: FunctionVersion) -> None:
        pass

    @classmethod
    def validate_environment(cls) -> bool:
        return Path(settings.host_python()).exists()


class HostRuntimeExecutorPlugin(RuntimeExecutorPlugin):
    name = "host"

    def load(self, *args, **kwargs) -> type[RuntimeExecutor]:
        return HostRuntimeExecutor
