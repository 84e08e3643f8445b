"""The deployed stack the commands act on: its outputs, parameters and resources, read from CloudFormation
(no resource name is spelled here), and the clients of its account."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError
from lake_contracts.resend_horizon import MIN_TOMBSTONE_RETENTION_DAYS

LEASE_KEY = "locks/pipeline-lease.json"
FULL_LOAD_MARKER_KEY = "manifests/full-load.json"

Clients = Callable[[str], Any]  # service name -> a boto3 client of the stack's account and region


@dataclass(frozen=True)
class Stack:
    name: str
    outputs: dict[str, str]
    parameters: dict[str, str] = field(default_factory=dict)
    resources: dict[str, str] = field(default_factory=dict)  # logical id -> physical id

    def output(self, key: str) -> str:
        try:
            return self.outputs[key]
        except KeyError:
            raise LookupError(
                f"stack {self.name} has no output {key}: is it this pipeline's stack?"
            ) from None

    @property
    def artifacts_bucket(self) -> str:
        return self.output("ArtifactsBucketName")

    @property
    def lease_uri(self) -> str:
        return f"s3://{self.artifacts_bucket}/{LEASE_KEY}"

    @property
    def tombstone_retention_days(self) -> int:
        return int(self.parameters.get("TombstoneRetentionDays") or MIN_TOMBSTONE_RETENTION_DAYS)

    @property
    def dms_task_arn(self) -> str:
        """The task the stack created, else the one it was given."""
        arn = self.resources.get("DmsReplicationTask") or self.parameters.get("DmsReplicationTaskArn")
        if not arn:
            raise LookupError(f"stack {self.name} names no DMS replication task")
        return arn


def load_stack(cloudformation: Any, name: str) -> Stack:
    described = cloudformation.describe_stacks(StackName=name)["Stacks"][0]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])}
    parameters = {p["ParameterKey"]: p.get("ParameterValue") or "" for p in described.get("Parameters", [])}
    resources: dict[str, str] = {}
    for page in cloudformation.get_paginator("list_stack_resources").paginate(StackName=name):
        for resource in page.get("StackResourceSummaries", []):
            resources[resource["LogicalResourceId"]] = resource.get("PhysicalResourceId", "")
    return Stack(name, outputs, parameters, resources)


def object_exists(s3: Any, bucket: str, key: str) -> bool:
    try:
        s3.head_object(Bucket=bucket, Key=key)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return False
        raise
    return True


def read_json(s3: Any, bucket: str, key: str) -> dict[str, Any] | None:
    """An S3 JSON document, None when it does not exist (or is not a JSON object)."""
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except s3.exceptions.NoSuchKey:
        return None
    try:
        document = json.loads(body)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None
