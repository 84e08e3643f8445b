"""Runs inside the Lambda host process (the project's Python, stdlib only): a tiny Lambda runtime.

Protocol with the executor in LocalStack: one JSON object per line. stdin brings invocations
{"request_id", "function_arn", "payload", "trace_id", "deadline_ms"}; the original stdout carries
{"status": "ready"} once, then one {"request_id", "is_error", "payload", "logs"} per invocation.
Everything the handler prints (and logging) goes to stderr and into the invocation's logs.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import sys
import time
import traceback
from typing import Any


class _TeeToInvocationLogs(io.TextIOBase):
    """A text stream that copies writes to the process's stderr and to the current invocation's buffer."""

    def __init__(self, sink: Any) -> None:
        self._sink = sink
        self.buffer_of_invocation = io.StringIO()

    def write(self, text: str) -> int:
        self._sink.write(text)
        self._sink.flush()
        self.buffer_of_invocation.write(text)
        return len(text)

    def flush(self) -> None:
        self._sink.flush()

    def isatty(self) -> bool:
        return False

    def take(self) -> str:
        text = self.buffer_of_invocation.getvalue()
        self.buffer_of_invocation = io.StringIO()
        return text


class LambdaContext:
    def __init__(self, request_id: str, function_arn: str, deadline_ms: int) -> None:
        self.aws_request_id = request_id
        self.invoked_function_arn = function_arn
        self.function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "")
        self.function_version = os.environ.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        self.memory_limit_in_mb = os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
        self.log_group_name = os.environ.get("AWS_LAMBDA_LOG_GROUP_NAME", "")
        self.log_stream_name = os.environ.get("AWS_LAMBDA_LOG_STREAM_NAME", "")
        self.identity = None
        self.client_context = None
        self._deadline_ms = deadline_ms

    def get_remaining_time_in_millis(self) -> int:
        return max(0, self._deadline_ms - int(time.time() * 1000))


def error_payload(error: BaseException, error_type: str | None = None) -> dict[str, Any]:
    trace = error.__traceback__
    if trace is not None and trace.tb_frame.f_code.co_filename == __file__:
        trace = trace.tb_next  # the handler's frames only, as Lambda shows them
    return {
        "errorMessage": str(error),
        "errorType": error_type or type(error).__name__,
        "requestId": "",
        "stackTrace": traceback.format_tb(trace),
    }


def load_handler(handler_spec: str) -> Any:
    module_path, _, function_name = handler_spec.rpartition(".")
    module = importlib.import_module(module_path.replace("/", "."))
    return getattr(module, function_name)


def main() -> None:
    protocol_out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray writes to fd 1 (C code, subprocesses) must not corrupt the protocol
    tee = _TeeToInvocationLogs(sys.__stderr__)
    sys.stdout = sys.stderr = tee
    sys.path.insert(0, os.environ.get("LAMBDA_TASK_ROOT", os.getcwd()))

    init_error: dict[str, Any] | None = None
    handler: Any = None  # what the module names, when it imports
    try:
        handler = load_handler(os.environ["_HANDLER"])
    except Exception as error:
        kind = "Runtime.ImportModuleError" if isinstance(error, ImportError) else "Runtime.HandlerNotFound"
        if not isinstance(error, ImportError | AttributeError):
            kind = type(error).__name__
        init_error = error_payload(error, kind)
        init_error["errorMessage"] = f"Unable to import module '{os.environ.get('_HANDLER')}': {error}"
        traceback.print_exc()
    init_logs = tee.take()
    protocol_out.write(json.dumps({"status": "ready"}) + "\n")

    for line in sys.stdin:
        invocation = json.loads(line)
        os.environ["_X_AMZN_TRACE_ID"] = invocation.get("trace_id") or ""
        request_id = invocation["request_id"]
        print(f"START RequestId: {request_id} Version: {os.environ.get('AWS_LAMBDA_FUNCTION_VERSION')}")
        started = time.monotonic()
        if init_error is not None:
            is_error, result = True, init_error
            print(f"[ERROR] {init_error['errorType']}: {init_error['errorMessage']}")
        else:
            try:
                event = json.loads(invocation["payload"]) if invocation["payload"] else {}
                context = LambdaContext(request_id, invocation["function_arn"], invocation["deadline_ms"])
                result, is_error = handler(event, context), False
            except Exception as error:
                is_error, result = True, error_payload(error)
                result["requestId"] = request_id
                print(f"[ERROR] {type(error).__name__}: {error}")
                traceback.print_exc()
        print(f"END RequestId: {request_id}")
        print(f"REPORT RequestId: {request_id}\tDuration: {(time.monotonic() - started) * 1000:.2f} ms")
        try:
            payload = json.dumps(result)
        except (TypeError, ValueError) as error:
            is_error = True
            payload = json.dumps(error_payload(error, "Runtime.MarshalError"))
        response = {"request_id": request_id, "is_error": is_error, "payload": payload}
        response["logs"] = init_logs + tee.take()
        init_logs = ""
        protocol_out.write(json.dumps(response) + "\n")


if __name__ == "__main__":
    main()
