"""What a reconcile run reports: per table (TableResult) and as a whole, and the keys it keeps in
`<clean_db>_records.dms_divergence`."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from lakehouse.base.config import LakeConfig
from lakehouse.io.frames import rows_frame
from lakehouse.io.iceberg import append_rows, create_table, ensure_namespace, table_exists

log = logging.getLogger(__name__)

KINDS = ("missing", "extra", "differing")
DIVERGENCE_SCHEMA = T.StructType(
    [
        T.StructField("run_id", T.StringType()),
        T.StructField("source_table", T.StringType()),
        T.StructField("key", T.StringType()),
        T.StructField("kind", T.StringType()),
        T.StructField("detected_at", T.TimestampType()),
    ]
)


@dataclass
class TableResult:
    table: str
    key_mode: str = ""  # "range" (one integer key) or "hash"
    segments: int = 0  # first-level segments
    levels: int = 0
    source_rows_hashed: int = 0
    lake_rows_hashed: int = 0
    source_rows_fetched: int = 0  # rows (key + row hash) moved from the source to find differing keys
    source_bytes: int = 0  # payload bytes the source returned (values as text)
    source_queries: int = 0
    missing: int = 0
    extra: int = 0
    differing: int = 0
    in_flight: int = 0  # differed, not (yet) confirmed: seen less than S ago, or the lake not caught up
    recheck: str = ""  # "confirmed" | "settling" | "lake behind" | "not needed" | "no raw path"
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    repaired: bool = False
    source_rows: int = 0  # the source's rows as the reconcile's reader saw them (the first level's sums)
    source_empty: bool = False  # the source held no row at the check (a TRUNCATE: DMS reloads write nothing)
    emptied: bool = False  # repaired by emptying the clean table here (a reload with no rows), not by DMS
    reload_pending: bool = False  # a reload asked of DMS earlier is not applied yet: not asked again
    repair_refused: str | None = None  # the check that refused the repair (lakehouse.reconcile.repair_checks)
    # columns left out of the comparison: DMS carries them lossily (lakehouse.reconcile.plan.carried_lossily)
    not_compared: list[str] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None

    @property
    def diverged(self) -> bool:
        return bool(self.missing or self.extra or self.differing)


@dataclass
class ReconcileReport:
    run_id: str
    job: str = "reconcile"
    started_at: str = ""
    tables: list[TableResult] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)  # the row budget was spent: next run's
    next_table: str | None = None
    repairs: int = 0
    divergence_rows_added: int = 0
    seconds: float = 0.0
    error: str | None = None
    # per table, the differences seen and not yet judged or still standing, for the next run (not reported)
    sightings: dict[str, Any] = field(default_factory=dict, repr=False)
    # per table, when a reload still pending was asked of DMS, for the next run (not reported)
    reload_requests: dict[str, datetime] = field(default_factory=dict, repr=False)

    @property
    def diverged(self) -> list[TableResult]:
        return [t for t in self.tables if t.diverged]

    @property
    def failed(self) -> list[TableResult]:
        return [t for t in self.tables if t.error]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.error

    def totals(self) -> dict[str, int]:
        keys = (
            "missing",
            "extra",
            "differing",
            "in_flight",
            "source_rows_hashed",
            "source_bytes",
            "source_rows_fetched",
        )
        totals = {k: sum(getattr(t, k) for t in self.tables) for k in keys}
        totals["diverged_tables"] = len(self.diverged)
        totals["repairs"] = self.repairs
        return totals

    def to_dict(self) -> dict[str, Any]:
        document = asdict(replace(self, sightings={}))  # the sightings (up to 100,000 a table) are state
        del document["sightings"], document["reload_requests"]
        document["totals"] = self.totals()
        return document


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def divergence_table(config: LakeConfig) -> str:
    return config.divergence


def write_divergence(spark: SparkSession, config: LakeConfig, report: ReconcileReport, at: datetime) -> int:
    """Append the sample keys of every diverged table to `<clean_db>_records.dms_divergence`; returns the rows."""
    rows = [
        {
            "run_id": report.run_id,
            "source_table": result.table,
            "key": canonical_json(key),
            "kind": kind,
            "detected_at": at,
        }
        for result in report.tables
        for kind in KINDS
        for key in result.samples.get(kind, [])
    ]
    if not rows:
        return 0
    table = divergence_table(config)
    ensure_namespace(spark, config.catalog_name, config.records_database)
    if not table_exists(spark, table):
        create_table(spark, table, DIVERGENCE_SCHEMA, "Keys where a clean table differs from its source")
    append_rows(
        spark, table, rows_frame(spark, rows, DIVERGENCE_SCHEMA), {"dms.reconcile-run": report.run_id}
    )
    return len(rows)
