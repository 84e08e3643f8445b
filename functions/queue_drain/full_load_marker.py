"""The full-load marker (manifests/full-load.json): when the pipeline's full-load job started. A LOAD file
created before it was read by that job; a later one is a reload of its table."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError
from drain_config import Locations
from lake_contracts.s3 import is_missing
from lake_contracts.times import parse_time


def full_load_started(s3: Any, where: Locations) -> datetime | None:
    """When the pipeline's full-load job started: LOAD files created before it were read by it."""
    try:
        body = s3.get_object(Bucket=where.artifacts_bucket, Key=where.full_load_marker_key)["Body"].read()
    except ClientError as error:
        if is_missing(error):
            return None
        raise
    return read_full_load_marker(body)


def read_full_load_marker(document: bytes) -> datetime | None:
    """`started_at` of the full-load marker (manifests/full-load.json), or None when it is unreadable (then
    every LOAD file is a reload request: costs a reload, loses nothing).

    The state machine writes it with aws-sdk:s3:putObject and `"Body.$": "States.JsonToString($.full_load)"`:
    AWS writes that string as is, `{"started_at":"…"}`; LocalStack 2026.3's Step Functions JSON-encodes any
    non-bytes blob parameter, a string too (state_task_service.py `_to_boto_request_value`), so it writes
    `"{\"started_at\":\"…\"}"`, a JSON string holding the object. Both are read; the time is Step
    Functions' `$$.State.EnteredTime` (`…T03:32:48.177403+00:00`) or any ISO-8601 with `Z`."""
    try:
        marker = json.loads(document)
        if isinstance(marker, str):
            marker = json.loads(marker)  # LocalStack's encoding of a string Body (see above)
        started = parse_time(str(marker["started_at"]))
    except (ValueError, KeyError, TypeError):
        return None
    return started
