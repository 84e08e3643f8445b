"""DMS: moto keeps endpoints and replication instances; this provider owns replication tasks and runs them.

Source endpoints: EngineName `postgres` (ServerName, Port, DatabaseName, Username, Password; extra connection
attributes `slotName`, `publicationName`, `PluginName=pgoutput`), read through a logical replication slot as DMS
reads it; EngineName `mysql`/`mariadb`/`aurora` (ServerName: a host or a Unix socket path, Port, Username,
Password, DatabaseName = the database replicated), read from the binlog as DMS reads it (dms_mysql); or, a local
convention, EngineName `sqlite` with DatabaseName = the path of an SQLite file on the host.
ExtraConnectionAttributes `schemaName=<name>` (default `public` / `main`) = the schema replicated, the files' folder.
Target endpoint: EngineName `s3` with S3Settings (BucketName, BucketFolder, AddColumnName, IncludeOpForFullLoad,
TimestampColumnName, CsvNullValue, CdcMaxBatchInterval, CdcMinFileSize, MaxFileSize).

Monitoring as AWS DMS does it: when a started task stops or fails, its state-change event goes to the default
EventBridge bus (source `aws.dms`, detail-type `DMS Replication Task State Change`, the task's ARN in
`resources`, `detail.eventType` REPLICATION_TASK_STOPPED or REPLICATION_TASK_FAILED); while it runs CDC, it
publishes CDCLatencySource and CDCLatencyTarget (seconds, namespace AWS/DMS, dimensions
ReplicationInstanceIdentifier and ReplicationTaskIdentifier = the task's resource ID) every
LOCALAWS_DMS_METRICS_SECONDS (default 5; AWS: every minute).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import string
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import boto3
from localstack.aws.api import CommonServiceException, RequestContext, handler
from localstack.services.plugins import ServiceLifecycleHook

from localaws_plugin import settings
from localaws_plugin.dms_format import S3TargetSettings, TableMapping
from localaws_plugin.dms_replication import ReplicationRun, SourceSettings, TaskOptions

SECONDS_IN_CREATING = 0.5
SOURCE_ENGINES = frozenset({"sqlite", "postgres", "mysql", "mariadb", "aurora"})
WATCH_SECONDS = 0.25
STATE_CHANGE = "DMS Replication Task State Change"
# status -> (eventType, category, eventId) of the event AWS DMS sends when a task ends in that status
END_EVENTS = {
    "stopped": ("REPLICATION_TASK_STOPPED", "StateChange", "DMS-EVENT-0079"),
    "failed": ("REPLICATION_TASK_FAILED", "Failure", "DMS-EVENT-0078"),
}
LOG = logging.getLogger(__name__)


def metrics_seconds() -> float:
    return float(os.environ.get("LOCALAWS_DMS_METRICS_SECONDS") or 5)


def _fault(code: str, message: str) -> CommonServiceException:
    return CommonServiceException(code, message, status_code=400)


@dataclass
class ReplicationTask:
    identifier: str
    arn: str
    account_id: str
    region: str
    request: dict[str, Any]
    run: ReplicationRun
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    created_monotonic: float = field(default_factory=time.monotonic)
    started_once: bool = False
    instance_identifier: str = ""  # the ReplicationInstanceIdentifier dimension of its metrics

    def status(self) -> str:
        if not self.started_once:
            return "creating" if time.monotonic() - self.created_monotonic < SECONDS_IN_CREATING else "ready"
        return self.run.status

    def as_api(self) -> dict[str, Any]:
        run = self.run
        task: dict[str, Any] = {
            "ReplicationTaskIdentifier": self.identifier,
            "ReplicationTaskArn": self.arn,
            "SourceEndpointArn": self.request["SourceEndpointArn"],
            "TargetEndpointArn": self.request["TargetEndpointArn"],
            "ReplicationInstanceArn": self.request.get("ReplicationInstanceArn", ""),
            "MigrationType": self.request["MigrationType"],
            "TableMappings": self.request["TableMappings"],
            "ReplicationTaskSettings": self.request.get("ReplicationTaskSettings") or "{}",
            "Status": self.status(),
            "ReplicationTaskCreationDate": self.created_at,
        }
        if run.start_date:
            task["ReplicationTaskStartDate"] = run.start_date
        if run.stop_reason:
            task["StopReason"] = run.stop_reason
        if run.last_failure_message:
            task["LastFailureMessage"] = run.last_failure_message
        stats: dict[str, Any] = {
            "FullLoadProgressPercent": run.full_load_percent,
            "ElapsedTimeMillis": run.elapsed_millis,
            "TablesLoaded": run.tables_loaded,
            "TablesLoading": run.tables_loading,
            "TablesQueued": run.tables_queued,
            "TablesErrored": run.tables_errored,
        }
        for key, value in (
            ("FreshStartDate", run.fresh_start_date),
            ("StartDate", run.start_date),
            ("StopDate", run.stop_date),
            ("FullLoadStartDate", run.full_load_start),
            ("FullLoadFinishDate", run.full_load_finish),
        ):
            if value is not None:
                stats[key] = value
        task["ReplicationTaskStats"] = stats
        return task


class DmsReplicationProvider(ServiceLifecycleHook):
    def __init__(self) -> None:
        self._tasks: dict[str, ReplicationTask] = {}
        self._lock = threading.Lock()

    def on_before_stop(self) -> None:
        for task in self._tasks.values():
            if task.run.status in ("starting", "running"):
                task.run.stop(wait=False)

    def _endpoint(self, context: RequestContext, arn: str) -> Any:
        from moto.dms.models import dms_backends

        for endpoint in dms_backends[context.account_id][context.region].endpoints.values():
            if endpoint.endpoint_arn == arn:
                return endpoint
        raise _fault("ResourceNotFoundFault", f"Endpoint {arn} not found")

    def _task(self, context: RequestContext, arn: str) -> ReplicationTask:
        task = self._tasks.get(arn)
        if task is None or task.account_id != context.account_id or task.region != context.region:
            raise _fault("ResourceNotFoundFault", f"Replication Task {arn} not found")
        return task

    @staticmethod
    def _s3(context: RequestContext) -> Any:
        """An S3 client of the local AWS, as the task's account (so bucket notifications fire)."""
        return boto3.client(
            "s3",
            endpoint_url=settings.endpoint_url(),
            region_name=context.region,
            aws_access_key_id=context.account_id,
            aws_secret_access_key="test",
        )

    @staticmethod
    def _client(service: str, account_id: str, region: str) -> Any:
        return boto3.client(
            service,
            endpoint_url=settings.endpoint_url(),
            region_name=region,
            aws_access_key_id=account_id,
            aws_secret_access_key="test",
        )

    def _instance_identifier(self, context: RequestContext, arn: str) -> str:
        """The replication instance's identifier (moto's instance of that ARN), else the ARN's last part."""
        from moto.dms.models import dms_backends

        backend = dms_backends[context.account_id][context.region]
        for instance in getattr(backend, "replication_instances", {}).values():
            if (
                getattr(instance, "arn", None) == arn
                or getattr(instance, "replication_instance_arn", None) == arn
            ):
                return str(
                    getattr(instance, "id", "") or getattr(instance, "replication_instance_identifier", "")
                )
        return arn.rsplit(":", 1)[-1]

    def _watch(self, task: ReplicationTask, run: ReplicationRun) -> None:
        """One started run: its CDC latency metrics while it runs, its state-change event when it ends."""
        cloudwatch = self._client("cloudwatch", task.account_id, task.region)
        published = 0.0
        while run.status not in END_EVENTS:
            captured_at = run.captured_at
            if (
                run.status == "running"
                and captured_at is not None
                and time.monotonic() - published >= (metrics_seconds())
            ):
                published = time.monotonic()
                try:
                    self._put_latency(cloudwatch, task, run, captured_at)
                except Exception:
                    LOG.warning("local DMS: CDC latency metrics not published", exc_info=True)
            time.sleep(WATCH_SECONDS)
        try:
            self._put_state_change(task, run)
        except Exception:
            LOG.warning("local DMS: state-change event of %s not sent", task.identifier, exc_info=True)

    @staticmethod
    def _put_latency(cloudwatch: Any, task: ReplicationTask, run: ReplicationRun, captured_at: float) -> None:
        now = time.time()
        pending_since = run.pending_since
        dimensions = [
            {"Name": "ReplicationInstanceIdentifier", "Value": task.instance_identifier},
            {"Name": "ReplicationTaskIdentifier", "Value": task.arn.rsplit(":", 1)[-1]},
        ]
        values = {
            "CDCLatencySource": max(0.0, now - captured_at),
            "CDCLatencyTarget": max(0.0, now - pending_since) if pending_since else 0.0,
        }
        cloudwatch.put_metric_data(
            Namespace="AWS/DMS",
            MetricData=[
                {"MetricName": name, "Dimensions": dimensions, "Value": round(value, 3), "Unit": "Seconds"}
                for name, value in values.items()
            ],
        )

    def _put_state_change(self, task: ReplicationTask, run: ReplicationRun) -> None:
        event_type, category, event_id = END_EVENTS[run.status]
        if run.status == "failed":
            message = f"Replication task has failed. Reason: {run.last_failure_message or run.stop_reason}"
        else:
            message = f"Replication task has stopped. {run.stop_reason or ''}".strip()
        detail = {
            "type": "REPLICATION_TASK",
            "category": category,
            "eventType": event_type,
            "eventId": event_id,
            "resourceLink": f"https://console.aws.amazon.com/dms/v2/home?region={task.region}"
            f"#taskDetails/{task.identifier}",
            "detailMessage": message,
        }
        response = self._client("events", task.account_id, task.region).put_events(
            Entries=[
                {
                    "Source": "aws.dms",
                    "DetailType": STATE_CHANGE,
                    "Resources": [task.arn],
                    "Detail": json.dumps(detail),
                }
            ]
        )
        if response.get("FailedEntryCount"):
            LOG.warning("local DMS: state-change event refused: %s", response.get("Entries"))

    def _put_object_for(self, context: RequestContext) -> Any:
        client = self._s3(context)

        def put_object(bucket: str, key: str, body: bytes) -> None:
            kind = "application/vnd.apache.parquet" if key.endswith(".parquet") else "text/csv"
            client.put_object(Bucket=bucket, Key=key, Body=body, ContentType=kind)

        return put_object

    def _delete_prefix_for(self, context: RequestContext) -> Any:
        client = self._s3(context)

        def delete_prefix(bucket: str, prefix: str) -> None:
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
                keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                if keys:
                    client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})

        return delete_prefix

    def _build_run(self, context: RequestContext, request: dict[str, Any]) -> ReplicationRun:
        source = self._endpoint(context, request["SourceEndpointArn"])
        target = self._endpoint(context, request["TargetEndpointArn"])
        if str(source.engine_name).lower() not in SOURCE_ENGINES:
            raise _fault(
                "InvalidParameterValueException",
                f"the local DMS replicates from EngineName {' or '.join(sorted(SOURCE_ENGINES))} sources",
            )
        if str(target.engine_name).lower() != "s3":
            raise _fault("InvalidParameterValueException", "the local DMS writes to EngineName 's3' targets")
        try:
            target_settings = S3TargetSettings.from_endpoint(
                target.s3_settings, target.extra_connection_attributes
            )
            mapping = TableMapping.parse(request["TableMappings"])
            source_settings = SourceSettings.from_endpoint(
                source.database_name,
                source.server_name,
                source.extra_connection_attributes,
                engine=str(source.engine_name),
                port=int(source.port) if source.port else None,
                username=source.username,
                password=source.password,
                task_identifier=request["ReplicationTaskIdentifier"],
                postgres_settings=getattr(source, "postgre_sql_settings", None),
            )
            task_settings = json.loads(request.get("ReplicationTaskSettings") or "{}")
        except (ValueError, KeyError) as error:
            raise _fault("InvalidParameterValueException", str(error)) from error
        return ReplicationRun(
            migration_type=request["MigrationType"],
            source=source_settings,
            target=target_settings,
            mapping=mapping,
            options=TaskOptions.from_task_settings(task_settings),
            put_object=self._put_object_for(context),
            delete_prefix=self._delete_prefix_for(context),
        )

    @handler("CreateReplicationTask", expand=False)
    def create_replication_task(self, context: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
        identifier = request["ReplicationTaskIdentifier"]
        with self._lock:
            if any(
                t.identifier == identifier and t.account_id == context.account_id
                for t in self._tasks.values()
            ):
                raise _fault("ResourceAlreadyExistsFault", f"Replication task {identifier} already exists")
            resource_id = request.get("ResourceIdentifier") or "".join(
                secrets.choice(string.ascii_uppercase + string.digits) for _ in range(26)
            )
            arn = f"arn:aws:dms:{context.region}:{context.account_id}:task:{resource_id}"
            task = ReplicationTask(
                identifier,
                arn,
                context.account_id,
                context.region,
                dict(request),
                self._build_run(context, request),
                instance_identifier=self._instance_identifier(
                    context, request.get("ReplicationInstanceArn", "")
                ),
            )
            self._tasks[arn] = task
        return {"ReplicationTask": task.as_api()}

    @handler("StartReplicationTask", expand=False)
    def start_replication_task(self, context: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
        task = self._task(context, request["ReplicationTaskArn"])
        if task.status() in ("creating", "starting", "running", "stopping"):
            raise _fault(
                "InvalidResourceStateFault", f"Replication task is {task.status()}, it cannot be started"
            )
        task.started_once = True
        task.run.start(request.get("StartReplicationTaskType") or "start-replication")
        threading.Thread(
            target=self._watch, args=(task, task.run), name=f"dms-watch-{task.identifier}", daemon=True
        ).start()
        return {"ReplicationTask": task.as_api()}

    @handler("StopReplicationTask", expand=False)
    def stop_replication_task(self, context: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
        task = self._task(context, request["ReplicationTaskArn"])
        if task.status() not in ("starting", "running"):
            raise _fault(
                "InvalidResourceStateFault", f"Replication task is {task.status()}, it cannot be stopped"
            )
        task.run.stop(wait=False)
        return {"ReplicationTask": task.as_api()}

    @handler("DeleteReplicationTask", expand=False)
    def delete_replication_task(self, context: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
        task = self._task(context, request["ReplicationTaskArn"])
        if task.status() in ("starting", "running"):
            raise _fault("InvalidResourceStateFault", "Replication task is running; stop it first")
        self._tasks.pop(task.arn, None)
        response = task.as_api()
        response["Status"] = "deleting"
        return {"ReplicationTask": response}

    @handler("DescribeReplicationTasks", expand=False)
    def describe_replication_tasks(self, context: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
        tasks = [
            t
            for t in self._tasks.values()
            if t.account_id == context.account_id and t.region == context.region
        ]
        for name, values in ((f["Name"], set(f["Values"])) for f in request.get("Filters") or []):
            if name == "replication-task-arn":
                tasks = [t for t in tasks if t.arn in values]
            elif name == "replication-task-id":
                tasks = [t for t in tasks if t.identifier in values]
            elif name == "migration-type":
                tasks = [t for t in tasks if t.request["MigrationType"] in values]
            elif name == "endpoint-arn":
                tasks = [
                    t
                    for t in tasks
                    if {t.request["SourceEndpointArn"], t.request["TargetEndpointArn"]} & values
                ]
            elif name == "replication-instance-arn":
                tasks = [t for t in tasks if t.request.get("ReplicationInstanceArn") in values]
        if request.get("Filters") and not tasks:
            raise _fault("ResourceNotFoundFault", "No replication tasks found matching the filters")
        return {"ReplicationTasks": [t.as_api() for t in tasks]}

    @handler("ReloadTables", expand=False)
    def reload_tables(self, context: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
        task = self._task(context, request["ReplicationTaskArn"])
        schema = task.run.source_settings.schema
        tables = []
        for entry in request.get("TablesToReload") or []:
            if entry.get("SchemaName") not in (schema, None):
                raise _fault(
                    "InvalidParameterValueException", f"schema {entry.get('SchemaName')!r} is not {schema!r}"
                )
            tables.append(entry["TableName"])
        if not tables or len(tables) > 10:
            raise _fault("InvalidParameterValueException", "TablesToReload names 1 to 10 tables")
        try:
            task.run.request_reload(tables)
        except RuntimeError as error:
            raise _fault("InvalidResourceStateFault", str(error)) from error
        return {"ReplicationTaskArn": task.arn}

    @handler("DescribeTableStatistics", expand=False)
    def describe_table_statistics(self, context: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
        task = self._task(context, request["ReplicationTaskArn"])
        return {
            "ReplicationTaskArn": task.arn,
            "TableStatistics": [s.as_api() for s in task.run.table_statistics.values()],
        }
