"""The pipeline lease: one execution of the state machine at a time, enforced by a conditional write.

The lease is one S3 object naming the execution that holds it. An execution acquires it when
- it is absent (written with If-None-Match: *, so of two racing executions exactly one wins),
- it is held by an execution that is no longer RUNNING (failed, stopped, timed out, succeeded), or
- it is held by the execution that rolled over to this one (the `previous_execution` it passed on),
in the last two cases by a compare-and-swap on the object's ETag (If-Match), so two executions taking
over from the same dead holder cannot both win. Liveness is asked of Step Functions, not guessed from a
timeout: a RUNNING execution keeps its lease however long its CDC run takes, and a dead one never blocks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

MISSING = ("NoSuchKey", "404", "NotFound")
LOST_RACE = ("PreconditionFailed", "412", "ConditionalRequestConflict", "409")


@dataclass(frozen=True)
class LeaseDecision:
    acquired: bool
    holder: str
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"acquired": self.acquired, "holder": self.holder, "reason": self.reason}


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _document(execution_arn: str, now: datetime, taken_from: str | None) -> bytes:
    body = {
        "holder": execution_arn,
        "acquired_at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "taken_from": taken_from,
    }
    return json.dumps(body).encode()


def execution_status(sfn: Any, execution_arn: str) -> str:
    """RUNNING, SUCCEEDED, FAILED, TIMED_OUT, ABORTED… or MISSING when Step Functions does not know it."""
    try:
        return str(sfn.describe_execution(executionArn=execution_arn)["status"])
    except ClientError as error:
        if _code(error) in ("ExecutionDoesNotExist", "InvalidArn"):
            return "MISSING"
        raise


def acquire(
    s3: Any,
    sfn: Any,
    bucket: str,
    key: str,
    execution_arn: str,
    previous_execution: str | None = None,
    now: datetime | None = None,
) -> LeaseDecision:
    moment = now or datetime.now(UTC)
    try:
        s3.put_object(Bucket=bucket, Key=key, Body=_document(execution_arn, moment, None), IfNoneMatch="*")
        return LeaseDecision(True, execution_arn, "the lease was free")
    except ClientError as error:
        if _code(error) not in LOST_RACE:
            raise
    current = s3.get_object(Bucket=bucket, Key=key)
    holder = str(json.loads(current["Body"].read()).get("holder", ""))
    if holder == execution_arn:
        return LeaseDecision(True, holder, "this execution holds the lease already (a retried acquire)")
    if previous_execution and holder == previous_execution:
        reason = f"handed over by {holder}"
    else:
        status = execution_status(sfn, holder) if holder else "MISSING"
        if status == "RUNNING":
            return LeaseDecision(False, holder, f"execution {holder} is RUNNING and holds the pipeline lease")
        reason = f"taken over from {holder or 'nobody'} ({status})"
    try:
        s3.put_object(
            Bucket=bucket, Key=key, Body=_document(execution_arn, moment, holder), IfMatch=current["ETag"]
        )
    except ClientError as error:
        if _code(error) not in LOST_RACE:
            raise
        winner = str(json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read()).get("holder", ""))
        return LeaseDecision(
            winner == execution_arn, winner, f"another execution took the lease first: {winner}"
        )
    return LeaseDecision(True, execution_arn, reason)
