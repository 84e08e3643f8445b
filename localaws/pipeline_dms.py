"""The local DMS replication task of a local pipeline run: its ARN, fixed before the stack is deployed (the
template is given it), its settings, and what is done to it during a run (start, resume, reload tables, stop).
The task itself runs in the local AWS (`localaws/plugin`); `localaws/replication.py` creates it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from localaws import replication
from localaws.pipeline_settings import RunSettings
from tools.source_db import SourceDatabase


class LocalDmsTask:
    """The run's DMS task, through the local AWS's DMS API (`aws("dms")`). Not thread-safe."""

    def __init__(self, aws: Callable[[str], Any], settings: RunSettings) -> None:
        self.aws = aws
        self.settings = settings
        self.resource_identifier = replication.new_resource_identifier()
        self.task_arn = replication.task_arn(self.resource_identifier)
        self.task: replication.ReplicationTask | None = None

    def replication_settings(self, raw_bucket: str, source_schema: str) -> replication.ReplicationSettings:
        """The run's replication settings (the demo's defaults unless the run has its own) into `raw_bucket`."""
        base = self.settings.replication or replication.ReplicationSettings(bucket=raw_bucket)
        return replace(base, bucket=raw_bucket, source_schema=source_schema)

    def create(
        self, source_db: SourceDatabase, settings: replication.ReplicationSettings
    ) -> replication.ReplicationTask:
        """The task created (endpoints included) with the ARN fixed in advance, not started: a task of the
        user's own that a deploy with CreateDmsTask=false is given, created before the stack."""
        self.task = replication.create_replication_task(
            self.aws("dms"),
            source_db,
            settings,
            identifier=f"lake-{self.settings.name}",
            resource_identifier=self.resource_identifier,
        )
        return self.task

    def start(
        self, source_db: SourceDatabase, settings: replication.ReplicationSettings
    ) -> replication.ReplicationTask:
        """The task started (created first unless `create` made it)."""
        task = self.task or self.create(source_db, settings)
        replication.start_task(self.aws("dms"), task)
        return task

    def resume(self) -> None:
        """StartReplicationTask resume-processing: CDC goes on from the slot's last confirmed position."""
        assert self.task is not None
        self.aws("dms").start_replication_task(
            ReplicationTaskArn=self.task.arn, StartReplicationTaskType="resume-processing"
        )

    def reload_tables(self, source_schema: str, tables: tuple[str, ...]) -> None:
        """A DBA's table reload during CDC (DMS ReloadTables): DMS empties the tables' folders and writes
        new LOAD files."""
        assert self.task is not None
        self.aws("dms").reload_tables(
            ReplicationTaskArn=self.task.arn,
            TablesToReload=[{"SchemaName": source_schema, "TableName": t} for t in tables],
        )

    def stop(self) -> None:
        """Stop the task, if it was started."""
        if self.task is not None:
            replication.stop_task(self.aws("dms"), self.task)
