"""The statistics of one table of a replication task, as `DescribeTableStatistics` reports them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any


@dataclass
class TableStatistics:
    schema: str
    table: str
    state: str = "Table does not exist"
    full_load_rows: int = 0
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    last_update: datetime = field(default_factory=lambda: datetime.now(UTC))
    full_load_start: datetime | None = None
    full_load_end: datetime | None = None

    def as_api(self) -> dict[str, Any]:
        loaded = {
            key: value
            for key, value in (
                ("FullLoadStartTime", self.full_load_start),
                ("FullLoadEndTime", self.full_load_end),
            )
            if value is not None
        }
        return loaded | {
            "SchemaName": self.schema,
            "TableName": self.table,
            "Inserts": self.inserts,
            "Updates": self.updates,
            "Deletes": self.deletes,
            "Ddls": 0,
            "FullLoadRows": self.full_load_rows,
            "FullLoadCondtnlChkFailedRows": 0,
            "FullLoadErrorRows": 0,
            "LastUpdateTime": self.last_update,
            "TableState": self.state,
            "ValidationState": "Not enabled",
        }
