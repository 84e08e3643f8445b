"""Each function reads its environment once, as a typed model validated at cold start. A missing or
malformed variable fails the init (the import of app.py) with the variable's name, never an empty string or a
silent default discovered at the first call."""

from __future__ import annotations

import importlib
import re
import sys

import pytest
from lake_contracts.config import ConfigurationError, from_environment
from pydantic import BaseModel, Field

from tests.unit.functions.conftest import FUNCTIONS

# (function, environment, the variable the error must name): each one thing wrong, the rest as deployed.
REFUSED = [
    ("queue_drain", {"QUEUE_URL": ""}, "QUEUE_URL"),
    ("queue_drain", {"DEAD_LETTER_QUEUE_URL": None}, "DEAD_LETTER_QUEUE_URL"),
    ("queue_drain", {"ARTIFACTS_BUCKET": None}, "ARTIFACTS_BUCKET"),
    ("queue_drain", {"MAX_FILES_PER_RUN": "five hundred"}, "MAX_FILES_PER_RUN"),
    ("queue_drain", {"MAX_BYTES_PER_RUN": "0"}, "MAX_BYTES_PER_RUN"),
    ("queue_drain", {"DRAIN_TIME_BUDGET_SECONDS": "nan"}, "DRAIN_TIME_BUDGET_SECONDS"),
    ("queue_drain", {"MAX_MANIFEST_ATTEMPTS": "0"}, "MAX_MANIFEST_ATTEMPTS"),
    # was read as "continue" (anything but "stop"): a typo silently chose the other policy
    ("queue_drain", {"ON_STUCK_BATCH": "Stop"}, "ON_STUCK_BATCH"),
    ("acknowledge", {"ARTIFACTS_BUCKET": None}, "ARTIFACTS_BUCKET"),
    ("acknowledge", {"LEASE_KEY": ""}, "LEASE_KEY"),
    ("lease", {"ARTIFACTS_BUCKET": ""}, "ARTIFACTS_BUCKET"),
    ("reloads", {"ARTIFACTS_BUCKET": None}, "ARTIFACTS_BUCKET"),
    ("reloads", {"DMS_TASK_ARN": "DEVTORAW"}, "DMS_TASK_ARN"),
    ("dms_progress", {"DMS_TASK_ARN": "arn:aws:s3:::not-a-task"}, "DMS_TASK_ARN"),
    ("history_guard", {"HISTORY_THRESHOLD": "25000"}, "HISTORY_THRESHOLD"),
    ("history_guard", {"HISTORY_THRESHOLD": "20k"}, "HISTORY_THRESHOLD"),
    ("watchdog", {"STATE_MACHINE_ARN": None}, "STATE_MACHINE_ARN"),
    ("watchdog", {"MEASURE_REFINED_LAG": "maybe"}, "MEASURE_REFINED_LAG"),
]
DEPLOYED = {
    "queue_drain": {
        "QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/dev-cdc-files.fifo",
        "DEAD_LETTER_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/dev-cdc-dlq.fifo",
        "ARTIFACTS_BUCKET": "dev-artifacts",
        "RAW_BUCKET": "dev-raw",
        "MAX_FILES_PER_RUN": "500",
        "MAX_BYTES_PER_RUN": "2147483648",
        "DRAIN_TIME_BUDGET_SECONDS": "240",
        "MAX_MANIFEST_ATTEMPTS": "3",
        "ON_STUCK_BATCH": "stop",
    },
    "acknowledge": {"ARTIFACTS_BUCKET": "dev-artifacts", "LEASE_KEY": "locks/pipeline-lease.json"},
    "lease": {"ARTIFACTS_BUCKET": "dev-artifacts", "GLUE_JOB_NAMES": "dev-full-load, dev-cdc,,"},
    "reloads": {
        "ARTIFACTS_BUCKET": "dev-artifacts",
        "DMS_TASK_ARN": "arn:aws:dms:us-east-1:123456789012:task:X",
    },
    "dms_progress": {"DMS_TASK_ARN": "arn:aws:dms:us-east-1:123456789012:task:X"},
    "history_guard": {"HISTORY_THRESHOLD": "20000"},
    "watchdog": {
        "STATE_MACHINE_ARN": "arn:aws:states:us-east-1:123456789012:stateMachine:dev-pipeline",
        "ARTIFACTS_BUCKET": "dev-artifacts",
        "MEASURE_REFINED_LAG": "true",
    },
}


def _environment(monkeypatch: pytest.MonkeyPatch, function: str, changes: dict[str, str | None]) -> dict:
    """The deployed environment with `changes` (None: unset), set in os.environ; what to pass load_handler."""
    environment = DEPLOYED[function] | changes
    for name in {*DEPLOYED[function], *changes}:
        monkeypatch.delenv(name, raising=False)
    return {name: value for name, value in environment.items() if value is not None}


@pytest.mark.parametrize(
    ("function", "changes", "variable"), REFUSED, ids=[f"{f}-{v}" for f, _, v in REFUSED]
)
def test_a_missing_or_malformed_variable_fails_the_init_naming_it(
    aws, monkeypatch, function, changes, variable
):
    """Given a function's deployed environment with one variable missing or malformed, When its app.py is
    imported (the Lambda's init), Then the init fails with a ConfigurationError naming that variable."""
    environment = _environment(monkeypatch, function, changes)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    monkeypatch.syspath_prepend(str(FUNCTIONS / function))
    for module in ("app", "progress", "drain", "ack", "guard", "lease", "reloads", "watchdog", "periodic"):
        monkeypatch.delitem(sys.modules, module, raising=False)

    with pytest.raises(ConfigurationError, match=rf"\b{variable}\b") as refused:
        importlib.import_module("app")

    named = re.findall(r"(?<![A-Z_])([A-Z_]+) \(", str(refused.value))
    assert named == [variable]  # that one only: the others are as deployed


@pytest.mark.parametrize("function", sorted(DEPLOYED))
def test_the_deployed_environment_is_read_into_the_functions_settings(
    aws, monkeypatch, load_handler, function
):
    """Given a function's environment as the template sets it, When app.py is imported, Then it starts and its
    settings hold the typed values (numbers as numbers, the job list as names)."""
    app = load_handler(function, **_environment(monkeypatch, function, {}))

    settings = app.SETTINGS.model_dump(by_alias=True)
    for name, text in DEPLOYED[function].items():
        value = settings[name]
        if name == "GLUE_JOB_NAMES":
            assert value == ("dev-full-load", "dev-cdc")
        elif isinstance(value, bool):
            assert value == (text == "true")
        elif isinstance(value, int | float):
            assert value == float(text)
        else:
            assert value == text


def test_every_problem_is_named_at_once_with_what_was_given():
    """Given a model with two required variables, one missing and one malformed, When read, Then the error
    names both, and what the malformed one held."""

    class Settings(BaseModel):
        bucket: str = Field(alias="BUCKET", min_length=1)
        count: int = Field(alias="COUNT", gt=0)

    with pytest.raises(ConfigurationError) as refused:
        from_environment(Settings, {"COUNT": "-3"})

    message = str(refused.value)
    assert "BUCKET (not set)" in message and "COUNT ('-3')" in message
