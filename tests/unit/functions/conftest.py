"""Lambda handlers run in-process against moto (no network), invoked with the files in events/."""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
EVENTS = REPO / "events"
FUNCTIONS = REPO / "functions"
REGION = "us-east-1"


@dataclass
class FakeContext:
    function_name: str = "test"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:test"
    aws_request_id: str = "00000000-0000-0000-0000-000000000000"
    remaining_ms: int = 120_000

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def event(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / name).read_text())


def hold_pipeline_lease(bucket: str, execution_arn: str, key: str = "locks/pipeline-lease.json") -> None:
    """The pipeline lease as functions/lease writes it, held by `execution_arn` (the drain checks it)."""
    import boto3

    document = {"holder": execution_arn, "acquired_at": "2026-11-22T10:10:10Z", "taken_from": None}
    boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=json.dumps(document).encode())


def drain_request(**fields: Any) -> dict[str, Any]:
    """events/queue_drain.json (the drain as the state machine calls it: with its execution), plus `fields`."""
    return event("queue_drain.json") | fields


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from tests.offline_aws import offline_aws

    powertools = {
        "POWERTOOLS_TRACE_DISABLED": "1",
        "POWERTOOLS_METRICS_NAMESPACE": "Test",
        "POWERTOOLS_SERVICE_NAME": "test",
    }
    with offline_aws(monkeypatch, REGION, **powertools):
        yield


# The variables a function's init refuses to start without (its Settings; template.yaml always sets them):
# placeholders, which a test replaces with its own where it uses them.
REQUIRED_ENVIRONMENT = {
    "queue_drain": {
        "QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/unused.fifo",
        "DEAD_LETTER_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/unused-dlq.fifo",
        "ARTIFACTS_BUCKET": "unused-artifacts",
    },
    "acknowledge": {"ARTIFACTS_BUCKET": "unused-artifacts"},
    "lease": {"ARTIFACTS_BUCKET": "unused-artifacts"},
    "reloads": {"ARTIFACTS_BUCKET": "unused-artifacts"},
    "watchdog": {
        "STATE_MACHINE_ARN": "arn:aws:states:us-east-1:123456789012:stateMachine:unused",
        "ARTIFACTS_BUCKET": "unused-artifacts",
        "MEASURE_REFINED_LAG": "false",
    },
}


# The functions' own modules, imported by their bare names from the function's folder: dropped before a load.
FUNCTION_MODULES = ("app", "progress", "drain", "ack", "guard", "lease", "reloads", "watchdog")
DRAIN_MODULES = (
    "drain_config",
    "drain_fence",
    "file_events",
    "full_load_marker",
    "pending_manifests",
    "queue_pages",
)


@pytest.fixture
def load_handler(monkeypatch: pytest.MonkeyPatch) -> Callable[..., ModuleType]:
    """Import functions/<name>/app.py fresh, after the environment it reads once is set."""

    def load(name: str, **environment: str) -> ModuleType:
        for key, value in REQUIRED_ENVIRONMENT.get(name, {}).items():
            if key not in os.environ and key not in environment:
                monkeypatch.setenv(key, value)
        for key, value in environment.items():
            monkeypatch.setenv(key, value)
        folder = str(FUNCTIONS / name)
        monkeypatch.syspath_prepend(folder)
        for module in (*FUNCTION_MODULES, *DRAIN_MODULES):
            sys.modules.pop(module, None)
        return importlib.import_module("app")

    return load
