"""The pipeline lease: one execution of the state machine at a time, enforced by a conditional write.

The lease is one S3 object naming the execution that holds it. An execution acquires it when
- it is absent (written with If-None-Match: *, so of two racing executions exactly one wins),
- it is held by an execution that is no longer RUNNING (failed, stopped, timed out, succeeded), or
- it is held by the execution that rolled over to this one: it names the holder as `previous_execution`
  AND is the successor the holder started itself, an execution of the same state machine named
  `rollover-<md5 hex of the holder's execution ARN>` (the name StartNextExecution gives it). The input
  alone proves nothing: whoever starts an execution chooses it; the name is the state machine's own.
in the last two cases by a compare-and-swap on the object's ETag (If-Match), so two executions taking
over from the same dead holder cannot both win. Liveness is asked of Step Functions, not guessed from a
timeout: a RUNNING execution keeps its lease however long its CDC run takes, and a dead one never blocks.
"""

from __future__ import annotations

import hashlib
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


def rollover_successor_name(predecessor_arn: str) -> str:
    """The name the state machine gives the successor it starts on rollover:
    States.Format('rollover-{}', States.Hash($$.Execution.Id, 'MD5')); States.Hash returns the digest as
    lower-case hex (AWS: States.Hash('input data', 'MD5') = '812f45842bc6d66ee14572ce20db8e86')."""
    return "rollover-" + hashlib.md5(predecessor_arn.encode()).hexdigest()


def is_rollover_successor(execution_arn: str, predecessor_arn: str) -> bool:
    """True when `execution_arn` is the execution `predecessor_arn` started on rollover: of the same
    state machine (the ARN up to the execution name is the same) and named after the predecessor."""
    machine, _, name = execution_arn.rpartition(":")
    predecessor_machine = predecessor_arn.rpartition(":")[0]
    return machine == predecessor_machine and name == rollover_successor_name(predecessor_arn)


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
    names_the_holder = bool(holder) and previous_execution == holder
    if names_the_holder and is_rollover_successor(execution_arn, holder):
        reason = f"handed over by {holder}"
    else:
        status = execution_status(sfn, holder) if holder else "MISSING"
        if status == "RUNNING":
            refusal = f"execution {holder} is RUNNING and holds the pipeline lease"
            if names_the_holder:
                refusal += (
                    f"; {execution_arn} names it as previous_execution but is not its rollover successor"
                    f" (an execution of the same state machine named {rollover_successor_name(holder)})"
                )
            return LeaseDecision(False, holder, refusal)
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
