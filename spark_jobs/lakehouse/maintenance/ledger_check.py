"""Before a replica's snapshots expire, the ledger learns every applied-file name their summaries hold and
forgets its rows of rolled-back commits among them (docs/CONTRACTS.md, "Exactly once, in any order"). Bounded by
what is about to expire: only the snapshots committed before the expiry's cutoff are read, and only the ledger
rows naming their files are looked up (the ledger is never read whole into the driver)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse.apply.ledger import LedgerEntry, RecordedFile, StateTables, lineage
from lakehouse.base.names import sql_string
from lakehouse.io.iceberg import (
    APPLIED_FILES,
    REPLACED_SNAPSHOT,
    RUN_ID,
    SOURCE_TABLE,
    current_snapshot_id,
    table_properties,
)


def reconcile_before_expiry(spark: SparkSession, state: StateTables, table: str, cutoff: datetime) -> int:
    """Copy into the ledger the applied files named by `table`'s snapshots committed before `cutoff` (those
    an expiry at that cutoff may remove) that it lacks, and drop its rows of such snapshots that are not
    ancestors of the current one (rolled back). Returns how many names were copied."""
    rows = spark.sql(
        f"SELECT snapshot_id, parent_id, summary[{sql_string(REPLACED_SNAPSHOT)}] AS replaced, "
        f"CASE WHEN committed_at < TIMESTAMP '{cutoff:%Y-%m-%d %H:%M:%S.%f}' "
        f"THEN summary[{sql_string(APPLIED_FILES)}] END AS applied, "
        f"summary[{sql_string(RUN_ID)}] AS run_id FROM {table}.snapshots"
    ).collect()
    expiring = [row for row in rows if row["applied"]]
    if not expiring:
        return 0
    parents = {
        r["snapshot_id"]: r["parent_id"] or (int(r["replaced"]) if r["replaced"] else None) for r in rows
    }
    ancestors = lineage(current_snapshot_id(spark, table), parents)
    source = source_table(spark, table)
    named = {(name, row["snapshot_id"]): row for row in expiring for name in json.loads(row["applied"])}
    recorded = _recorded(spark, state, source, {name for name, _ in named})
    entries = [
        LedgerEntry(source, name, None, row["run_id"] or "maintenance", snapshot)
        for (name, snapshot), row in sorted(named.items())
        if snapshot in ancestors and (name, snapshot) not in recorded
    ]
    forget = [
        (source, RecordedFile(name, snapshot))
        for name, snapshot in sorted(named)
        if snapshot not in ancestors and (name, snapshot) in recorded
    ]
    state.record(entries, forget)
    return len(entries)


def _recorded(
    spark: SparkSession, state: StateTables, source: str, names: Iterable[str]
) -> set[tuple[str, int]]:
    """The ledger's (file, snapshot) rows of one source table among `names`: a filtered read."""
    rows = (
        spark.table(state.ledger)
        .where((F.col("source_table") == source) & F.col("file_name").isin(sorted(names)))
        .select("file_name", "snapshot_id")
        .collect()
    )
    return {(row["file_name"], row["snapshot_id"]) for row in rows}


def source_table(spark: SparkSession, table: str) -> str:
    """The `schema.table` a replica holds (its `dms.source-table` property; older tables: the comment)."""
    properties = table_properties(spark, table)
    if SOURCE_TABLE in properties:
        return properties[SOURCE_TABLE]  # exactly: a name may begin or end with spaces
    named = properties.get("comment", "").removeprefix("DMS replica of ")
    return named or table.rsplit(".", 1)[-1]
