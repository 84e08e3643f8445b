"""The pure parts of the local EMR Serverless: what a job run's StartJobRun request means on this host, and
how a run looks in the API (no LocalStack import: unit-tested with the project's Python)."""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

# JobRunState: SUBMITTED → (PENDING → SCHEDULED →) RUNNING → SUCCESS | FAILED | CANCELLED; QUEUED beyond the
# application's concurrency; CANCELLING while a cancel takes effect.
TERMINAL_STATES = frozenset({"SUCCESS", "FAILED", "CANCELLED"})
ACTIVE_STATES = frozenset({"SUBMITTED", "PENDING", "SCHEDULED", "RUNNING", "QUEUED", "CANCELLING"})
DEFAULT_TIMEOUT_MINUTES = 720  # EMR Serverless's default executionTimeoutMinutes (12 hours)


@dataclass(frozen=True)
class SparkSubmit:
    """What `sparkSubmitParameters` asks of spark-submit: the Python libraries, jars and settings."""

    py_files: tuple[str, ...] = ()
    jars: tuple[str, ...] = ()
    conf: dict[str, str] = field(default_factory=dict)
    other: tuple[str, ...] = ()


def parse_spark_submit_parameters(text: str | None) -> SparkSubmit:
    """`--py-files a,b --jars c --conf k=v --conf k2=v2 …` (spark-submit's spellings, `--opt=value` too)."""
    tokens = shlex.split(text or "")
    py_files: list[str] = []
    jars: list[str] = []
    conf: dict[str, str] = {}
    other: list[str] = []
    position = 0
    while position < len(tokens):
        token = tokens[position]
        name, has_value, inline = token.partition("=") if token.startswith("--") else (token, "", "")
        if name in ("--py-files", "--jars", "--conf"):
            if has_value:
                value = inline
            elif position + 1 < len(tokens):
                position += 1
                value = tokens[position]
            else:
                raise ValueError(f"{name} without a value in sparkSubmitParameters")
            if name == "--conf":
                key, equals, setting = value.partition("=")
                if not equals:
                    raise ValueError(f"--conf {value!r} is not key=value")
                conf[key] = setting
            else:
                (py_files if name == "--py-files" else jars).extend(v for v in value.split(",") if v)
        else:
            other.append(token)
        position += 1
    return SparkSubmit(tuple(py_files), tuple(jars), conf, tuple(other))


def local_arguments(arguments: list[str], overrides: dict[str, str]) -> list[str]:
    """The entry point's arguments with each `--name value` named in `overrides` given the override's value
    (every occurrence: argparse keeps the last), and the overrides not present appended."""
    result = list(arguments)
    seen = set()
    for position, token in enumerate(result):
        if token in overrides and position + 1 < len(result):
            result[position + 1] = overrides[token]
            seen.add(token)
    for name, value in overrides.items():
        if name not in seen:
            result += [name, value]
    return result


def option_names(arguments: list[str]) -> set[str]:
    return {token for token in arguments if token.startswith("--")}


@dataclass
class JobRun:
    """One run of an application: what StartJobRun asked, and where it is."""

    application_id: str
    run_id: str
    account_id: str
    region: str
    name: str
    execution_role: str
    release_label: str
    job_driver: dict[str, Any]
    execution_timeout_minutes: int = DEFAULT_TIMEOUT_MINUTES
    configuration_overrides: dict[str, Any] | None = None
    tags: dict[str, str] = field(default_factory=dict)
    client_token: str | None = None
    state: str = "SUBMITTED"
    state_details: str = ""
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    updated_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    started_at: datetime | None = None
    ended_at: datetime | None = None
    process: subprocess.Popen | None = None
    cancel_requested: bool = False

    @property
    def arn(self) -> str:
        return (
            f"arn:aws:emr-serverless:{self.region}:{self.account_id}:/applications/"
            f"{self.application_id}/jobruns/{self.run_id}"
        )

    @property
    def spark_submit(self) -> dict[str, Any]:
        return (self.job_driver or {}).get("sparkSubmit") or {}

    def move_to(self, state: str, details: str = "") -> None:
        now = datetime.now(UTC)
        self.state = state
        self.updated_at = now
        if details:
            self.state_details = details
        if state == "RUNNING" and self.started_at is None:
            self.started_at = now
        if state in TERMINAL_STATES:
            self.ended_at = now

    def duration_seconds(self, now: datetime | None = None) -> int:
        if self.started_at is None:
            return 0
        return int(((self.ended_at or now or datetime.now(UTC)) - self.started_at).total_seconds())

    def as_api(self) -> dict[str, Any]:
        """GetJobRun's `jobRun`."""
        run: dict[str, Any] = {
            "applicationId": self.application_id,
            "jobRunId": self.run_id,
            "name": self.name,
            "arn": self.arn,
            "createdBy": f"arn:aws:iam::{self.account_id}:root",
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
            "executionRole": self.execution_role,
            "state": self.state,
            "stateDetails": self.state_details,
            "releaseLabel": self.release_label,
            "jobDriver": self.job_driver,
            "tags": self.tags,
            "totalExecutionDurationSeconds": self.duration_seconds(),
            "executionTimeoutMinutes": self.execution_timeout_minutes,
            "mode": "BATCH",
            "attempt": 1,
        }
        if self.configuration_overrides:
            run["configurationOverrides"] = self.configuration_overrides
        if self.started_at is not None:
            run["startedAt"] = self.started_at
        if self.ended_at is not None:
            run["endedAt"] = self.ended_at
        return run

    def as_summary(self) -> dict[str, Any]:
        """ListJobRuns' item."""
        return {
            "applicationId": self.application_id,
            "id": self.run_id,
            "name": self.name,
            "mode": "BATCH",
            "arn": self.arn,
            "createdBy": f"arn:aws:iam::{self.account_id}:root",
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
            "executionRole": self.execution_role,
            "state": self.state,
            "stateDetails": self.state_details,
            "releaseLabel": self.release_label,
            "type": "Spark",
        }


def _lower_keys(value: Any) -> Any:
    """CloudFormation's PascalCase properties as the API's camelCase (`WorkerCount` → `workerCount`)."""
    if isinstance(value, dict):
        return {key[:1].lower() + key[1:]: _lower_keys(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_lower_keys(item) for item in value]
    return value


# The worker sizes EMR Serverless accepts (EMR Serverless User Guide, "Supported worker configurations"):
# vCPU -> (least GB, most GB, step GB).
WORKER_MEMORY_GB = {1: (2, 8, 1), 2: (4, 16, 1), 4: (8, 30, 1), 8: (16, 60, 4), 16: (32, 120, 8)}


def check_worker_configuration(cpu: str, memory: str) -> None:
    """Refuse a worker configuration EMR Serverless refuses (a ValueError saying which and why)."""
    vcpu = float(str(cpu).lower().removesuffix("vcpu").strip())
    gb = float(str(memory).lower().removesuffix("gb").strip())
    limits = WORKER_MEMORY_GB.get(int(vcpu)) if vcpu.is_integer() else None
    if limits is None:
        raise ValueError(f"worker of {cpu}: EMR Serverless workers have 1, 2, 4, 8 or 16 vCPU")
    least, most, step = limits
    if not (least <= gb <= most and (gb - least) % step == 0):
        raise ValueError(
            f"worker of {cpu} and {memory}: EMR Serverless gives {cpu} workers {least}-{most} GB in steps of {step} GB"
        )


def application_request(model: dict[str, Any]) -> dict[str, Any]:
    """CreateApplication's request for an AWS::EMRServerless::Application resource model (its pre-initialized
    workers of sizes EMR Serverless accepts, or a ValueError)."""
    request: dict[str, Any] = {
        "name": model["Name"],
        "releaseLabel": model["ReleaseLabel"],
        "type": str(model["Type"]).upper(),
    }
    for key in ("AutoStartConfiguration", "AutoStopConfiguration", "MaximumCapacity"):
        if model.get(key):
            request[key[:1].lower() + key[1:]] = _lower_keys(model[key])
    if stop := request.get("autoStopConfiguration"):
        if "idleTimeoutMinutes" in stop:
            stop["idleTimeoutMinutes"] = int(stop["idleTimeoutMinutes"])
        if "enabled" in stop:
            stop["enabled"] = str(stop["enabled"]).lower() == "true"
    if (start := request.get("autoStartConfiguration")) and "enabled" in start:
        start["enabled"] = str(start["enabled"]).lower() == "true"
    if model.get("InitialCapacity"):  # a list of {Key, Value} in CloudFormation, a map in the API
        for item in model["InitialCapacity"]:
            worker = item["Value"]["WorkerConfiguration"]
            check_worker_configuration(worker["Cpu"], worker["Memory"])
        request["initialCapacity"] = {
            item["Key"]: {
                "workerCount": int(item["Value"]["WorkerCount"]),
                "workerConfiguration": _lower_keys(item["Value"]["WorkerConfiguration"]),
            }
            for item in model["InitialCapacity"]
        }
    if model.get("Tags"):
        request["tags"] = {tag["Key"]: tag["Value"] for tag in model["Tags"]}
    return request


def step_functions_error(code: str) -> str:
    """The error name Step Functions gives an EMR Serverless API error of its optimized integration."""
    return f"EMRServerless.{code}"
