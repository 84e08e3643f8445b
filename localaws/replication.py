"""The source side of a local pipeline run: the sample source database (PostgreSQL by default, or SQLite), its
schema file, and a DMS task (endpoints + replication task on the local DMS) that replicates it into the raw
bucket.

Used by `localaws.demo` and the pipeline integration tests. Locally the template's DMS resources are
off (a condition), so the task is created here through the DMS API and its ARN passed to the template.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tools import sample_data
from tools.source_db import SourceDatabase

SOURCE_TABLES: tuple[str, ...] = sample_data.TABLES
SCHEMA_FILE_KEY = "config/schema.json"
# DMS writes null and empty string alike unless CsvNullValue is set; the template's default token, which no
# text of a real source holds (unlike "NULL", a real surname), tells them apart.
CSV_NULL_VALUE = "~DMS~NULL~"
TIMESTAMP_COLUMN = "dms_timestamp"
CHANGE_SEQ_COLUMN = "AR_H_CHANGE_SEQ"
BEFORE_IMAGE_PREFIX = "BI_"
LOCAL_REPLICATION_INSTANCE = "arn:aws:dms:us-east-1:000000000000:rep:local"


@dataclass(frozen=True)
class ReplicationSettings:
    """The S3 target settings the pipeline relies on (docs/DEPLOY.md, "The DMS file contract")."""

    bucket: str
    folder: str = "dms"
    csv_null_value: str = CSV_NULL_VALUE
    timestamp_column: str = TIMESTAMP_COLUMN
    cdc_max_batch_interval_seconds: int = 2
    cdc_min_file_size_kb: int = 32_000
    poll_seconds: float = 0.5
    max_rows_per_load_file: int | None = None
    tables: Sequence[str] = SOURCE_TABLES
    data_format: str = "csv"  # the endpoint's DataFormat: csv or parquet
    source_schema: str = "public"  # the replicated schema (`main` for an SQLite source) = the files' folder

    def s3_settings(self) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "BucketName": self.bucket,
            "BucketFolder": self.folder,
            "DataFormat": self.data_format,
            "AddColumnName": True,
            "IncludeOpForFullLoad": True,
            "TimestampColumnName": self.timestamp_column,
            "CsvNullValue": self.csv_null_value,
            "CdcMaxBatchInterval": self.cdc_max_batch_interval_seconds,
            "CdcMinFileSize": self.cdc_min_file_size_kb,
            "ServiceAccessRoleArn": "arn:aws:iam::000000000000:role/dms-s3-target",
        }
        if self.data_format == "parquet":  # what docs/DEPLOY.md recommends for a Parquet endpoint
            settings |= {"ParquetVersion": "parquet-2-0", "EnableStatistics": True}
        return settings

    def table_mappings(self) -> dict[str, Any]:
        rules: list[dict[str, Any]] = [
            {
                "rule-type": "selection",
                "rule-id": str(number),
                "rule-name": f"include-{table}",
                "rule-action": "include",
                "object-locator": {"schema-name": self.source_schema, "table-name": table},
            }
            for number, table in enumerate(self.tables, start=1)
        ]
        rules += [
            {
                "rule-type": "transformation",
                "rule-id": "100",
                "rule-name": "change-sequence",
                "rule-action": "add-column",
                "rule-target": "column",
                "object-locator": {"schema-name": "%", "table-name": "%"},
                "value": CHANGE_SEQ_COLUMN,
                "expression": "$AR_H_CHANGE_SEQ",
                "data-type": {"type": "string", "length": 50},
            },
            {
                "rule-type": "transformation",
                "rule-id": "101",
                "rule-name": "primary-key-before-images",
                "rule-action": "add-before-image-columns",
                "rule-target": "column",
                "object-locator": {"schema-name": "%", "table-name": "%"},
                "before-image-def": {"column-prefix": BEFORE_IMAGE_PREFIX, "column-filter": "pk-only"},
            },
        ]
        return {"rules": rules}

    def task_settings(self) -> dict[str, Any]:
        local: dict[str, Any] = {"PollSeconds": self.poll_seconds}
        if self.max_rows_per_load_file:
            local["MaxRowsPerLoadFile"] = self.max_rows_per_load_file
        return {"TargetMetadata": {"SupportLobs": False}, "LocalAws": local}


@dataclass
class ReplicationTask:
    """A DMS replication task and the two endpoints made for it."""

    arn: str
    source_endpoint_arn: str
    target_endpoint_arn: str
    identifier: str
    started: bool = field(default=False)


def create_source_database(source: SourceDatabase, scale: float, seed: int = 42) -> dict[str, int]:
    """The TPC-DS-like source (web_sales star schema) in `source`; returns each table's row count."""
    return sample_data.create_source_database(source, scale, seed)


def schema_document(source: SourceDatabase, tables: Sequence[str] = SOURCE_TABLES) -> dict[str, Any]:
    """The schema file of the source, from its live catalog (what `python -m tools.schema_gen` writes),
    limited to the replicated tables (an SQLite source also holds the local DMS's change log)."""
    from tools.schema_gen import reflect_schema

    return reflect_schema(source.sqlalchemy_url, [source.schema], [f"{source.schema}.{t}" for t in tables])


def upload_schema_file(
    s3: Any, bucket: str, source: SourceDatabase, tables: Sequence[str] = SOURCE_TABLES
) -> str:
    """Regenerate the schema file from the source catalog and put it at `config/schema.json`: the
    operator procedure after DDL on the source (the CDC job reads it on every run)."""
    document = schema_document(source, tables)
    s3.put_object(
        Bucket=bucket,
        Key=SCHEMA_FILE_KEY,
        Body=(json.dumps(document, indent=2) + "\n").encode(),
        ContentType="application/json",
    )
    return f"s3://{bucket}/{SCHEMA_FILE_KEY}"


def add_column(source: SourceDatabase, table: str, column: str, sql_type: str) -> None:
    """A schema change on the source: `ALTER TABLE … ADD COLUMN`."""
    with source.connect() as db:
        db.execute(f'ALTER TABLE "{table}" ADD COLUMN "{column}" {sql_type}')


def source_endpoint(source: SourceDatabase) -> dict[str, Any]:
    """The DMS source endpoint of `source`: PostgreSQL as DMS reads it (a logical replication slot), MySQL (the
    binlog), or the local DMS's SQLite convention (DatabaseName = the file)."""
    if source.dialect == "sqlite":
        return {
            "EngineName": "sqlite",
            "DatabaseName": source.location,
            "ExtraConnectionAttributes": f"schemaName={source.schema}",
        }
    if source.dialect == "mysql":  # read from the binlog as DMS reads MySQL (localaws_plugin/dms_mysql.py)
        parts = source._mysql_parts()
        endpoint = {
            "EngineName": "mysql",
            "ServerName": parts["unix_socket"] or parts["host"],
            "Port": int(parts["port"]),
            "DatabaseName": parts["database"],
            "Username": parts["user"],
        }
        return endpoint | ({"Password": parts["password"]} if parts["password"] else {})
    from psycopg.conninfo import conninfo_to_dict

    connection = conninfo_to_dict(source.location)
    return {
        "EngineName": "postgres",
        "ServerName": str(connection.get("host") or "localhost"),
        "Port": int(connection.get("port") or 5432),
        "DatabaseName": str(connection.get("dbname") or "postgres"),
        "Username": str(connection.get("user") or "postgres"),
        # no slotName: the local DMS names the slot after the task (lake-demo → lake_demo)
        "ExtraConnectionAttributes": f"schemaName={source.schema};PluginName=pgoutput",
    }


def create_replication_task(
    dms: Any,
    source_db: SourceDatabase,
    settings: ReplicationSettings,
    migration_type: str = "full-load-and-cdc",
    identifier: str | None = None,
    resource_identifier: str | None = None,
) -> ReplicationTask:
    """Source endpoint (`source_endpoint`), S3 target endpoint and the replication task; waits until ready.
    `resource_identifier` fixes the ARN's last part (as in AWS), so the ARN is known before the task
    exists: `task_arn(resource_identifier)`."""
    name = identifier or f"lake-{uuid.uuid4().hex[:8]}"
    source = dms.create_endpoint(
        EndpointIdentifier=f"{name}-source", EndpointType="source", **source_endpoint(source_db)
    )["Endpoint"]["EndpointArn"]
    target = dms.create_endpoint(
        EndpointIdentifier=f"{name}-raw",
        EndpointType="target",
        EngineName="s3",
        S3Settings=settings.s3_settings(),
    )["Endpoint"]["EndpointArn"]
    task = dms.create_replication_task(
        ReplicationTaskIdentifier=name,
        SourceEndpointArn=source,
        TargetEndpointArn=target,
        ReplicationInstanceArn=LOCAL_REPLICATION_INSTANCE,
        MigrationType=migration_type,
        TableMappings=json.dumps(settings.table_mappings()),
        ReplicationTaskSettings=json.dumps(settings.task_settings()),
        **({"ResourceIdentifier": resource_identifier} if resource_identifier else {}),
    )["ReplicationTask"]
    created = ReplicationTask(task["ReplicationTaskArn"], source, target, name)
    wait_for(lambda: describe_task(dms, created.arn)["Status"] == "ready", 30, "DMS task ready")
    return created


def new_resource_identifier() -> str:
    """A DMS resource identifier (a letter first, then letters and digits)."""
    return "LAKE" + uuid.uuid4().hex[:20].upper()


def task_arn(resource_identifier: str, region: str = "us-east-1", account: str = "000000000000") -> str:
    return f"arn:aws:dms:{region}:{account}:task:{resource_identifier}"


def describe_task(dms: Any, arn: str) -> dict[str, Any]:
    tasks = dms.describe_replication_tasks(Filters=[{"Name": "replication-task-arn", "Values": [arn]}])
    return tasks["ReplicationTasks"][0]


def start_task(dms: Any, task: ReplicationTask) -> None:
    dms.start_replication_task(ReplicationTaskArn=task.arn, StartReplicationTaskType="start-replication")
    task.started = True


def stop_task(dms: Any, task: ReplicationTask, timeout: float = 30) -> str:
    """Stop the task if it runs (its last buffered changes are flushed to files); returns its status."""
    status = describe_task(dms, task.arn)["Status"]
    if status in ("running", "starting"):
        dms.stop_replication_task(ReplicationTaskArn=task.arn)
        wait_for(lambda: describe_task(dms, task.arn)["Status"] in ("stopped", "failed"), timeout, "DMS stop")
        status = describe_task(dms, task.arn)["Status"]
    return status


def delete_task(dms: Any, task: ReplicationTask) -> None:
    dms.delete_replication_task(ReplicationTaskArn=task.arn)
    for endpoint in (task.source_endpoint_arn, task.target_endpoint_arn):
        dms.delete_endpoint(EndpointArn=endpoint)


def table_statistics(dms: Any, arn: str) -> dict[str, dict[str, Any]]:
    statistics = dms.describe_table_statistics(ReplicationTaskArn=arn)["TableStatistics"]
    return {s["TableName"]: s for s in statistics}


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.25) -> Any:
    """Poll `predicate` until it returns something true; return that or raise TimeoutError."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: not reached within {timeout:.0f}s")
        time.sleep(interval)
