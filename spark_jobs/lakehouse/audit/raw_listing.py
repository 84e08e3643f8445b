"""What the consistent points list of the raw zone after each CDC run: per table, only what is recent.

Every CDC file a table's folder has named before the table's bound is applied, quarantined whole or
superseded by a reload, for good, so it cannot hold a consistent point back. The bound of a table is the
later of two facts recorded by earlier runs: its `applied_through_ts` in the freshness table (every change
committed up to it is applied, so every file named up to it is) and the newest consistent point less the
settle time (lakehouse.audit.consistent: every file named before it was listed and applied when that point
was recorded). A table without either is listed whole (the first measurement).

A table's folder is listed by day, whatever its date folders (`2026/11/22/`, `2026-11-22/`, `20261122/`,
`11/2026/22/`, none): a CDC file's name is `YYYYMMDD-HHMMSS…`, its only `-`, so a listing with the
delimiter `-` answers one entry a day of history (`…/20261122-`), never one a file. Days before the bound's
are left out; the bound's own day is listed from its second on (S3 StartAfter), later days whole. A folder
level whose name holds a `-` of its own (`2026-11-22/`) is listed again below it, left out when its digits,
read year first, are a day before the bound's (one day of margin for DatePartitionTimezone); a level that
does not read as a year-first date is always listed. The cost per table is one entry per day of history
(S3 answers 1,000 an request) plus the files of the recent days, not the raw zone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

from lake_contracts.dms_files import KnownTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse.audit import raw_zone
from lakehouse.audit.raw_files import RawFile, raw_cdc_files
from lakehouse.base.config import LakeConfig
from lakehouse.base.names import table_folder
from lakehouse.base.schema import SchemaFile, TableSpec
from lakehouse.io.iceberg import table_exists
from lakehouse.io.storage import ObjectInfo, list_grouped

DAY_GROUP = re.compile(r"(?:^|/)(?P<day>\d{8})-$")  # `…/20261122-`: the files a folder holds of that day
MAX_LEVELS = 8  # date folders holding `-` are at most 4 deep; deeper, a group is listed whole
TIMEZONE_MARGIN = timedelta(days=1)
LISTING_THREADS = 16


def before_bound(folder_digits: str, bound: datetime) -> bool:
    """A date folder path whose digits, read year first (`2026`, `202611`, `20261122`, `2026112210`), name a
    time wholly before `bound`'s day less the margin; False when they do not read as such a date."""
    digits = folder_digits[:10]
    if len(digits) < 4 or not 1970 <= int(digits[:4]) <= 2999:
        return False
    fields = ((4, 6, 1, 12), (6, 8, 1, 31), (8, 10, 0, 23))
    if any(
        len(digits) >= end and not low <= int(digits[start:end]) <= high for start, end, low, high in fields
    ):
        return False
    if len(digits) % 2:
        return False
    return digits < (bound - TIMEZONE_MARGIN).strftime("%Y%m%d%H")[: len(digits)]


def list_since(folder: str, bound: datetime | None, endpoint_url: str | None = None) -> list[ObjectInfo]:
    """The objects of a table's folder (`<raw>/<schema>/<table>/`) that may be CDC files named at or after
    `bound` (module docstring), LOAD files and other names among them; `bound` None: the whole folder."""
    if bound is None:
        return list_grouped(folder, endpoint_url)[0]
    found: list[ObjectInfo] = []
    levels = [folder]
    for _ in range(MAX_LEVELS):
        deeper = []
        for level in levels:
            objects, groups = list_grouped(level, endpoint_url, delimiter="-")
            found += objects
            for group in groups:
                day = DAY_GROUP.search(group[len(folder) :])
                if day is None:
                    digits = re.sub(r"\D", "", group[len(folder) :])
                    if not before_bound(digits, bound):
                        deeper.append(group)
                    continue
                named = datetime.strptime(day["day"], "%Y%m%d").date()
                if named > bound.date():
                    found += list_grouped(group, endpoint_url)[0]
                elif named == bound.date():
                    start = group + bound.strftime("%H%M%S")
                    found += list_grouped(group, endpoint_url, start_after=start)[0]
        if not deeper:
            return found
        levels = deeper
    for level in levels:
        found += list_grouped(level, endpoint_url)[0]
    return found


def previous_applied_through(spark: SparkSession, config: LakeConfig) -> dict[str, datetime]:
    """Lower-case `schema.table` -> its `applied_through_ts` as the freshness table last recorded it."""
    if not table_exists(spark, config.freshness):
        return {}
    rows = (
        spark.table(config.freshness)
        .where(F.col("applied_through_ts").isNotNull())
        .select("source_table", "applied_through_ts")
        .collect()
    )
    return {str(r["source_table"]).lower(): r["applied_through_ts"] for r in rows}


def table_bounds(
    schema: SchemaFile, applied_through: Mapping[str, datetime], after: datetime | None
) -> dict[str, datetime | None]:
    """Lower-case `schema.table` -> the bound its folder is listed from: the later of its applied-through time
    and `after` (the last point less the settle time); None when neither is known."""
    bounds: dict[str, datetime | None] = {}
    for name in schema.tables:
        known = [t for t in (applied_through.get(name.lower()), after) if t is not None]
        bounds[name.lower()] = max(known) if known else None
    return bounds


def recent_files(
    raw_path: str,
    schema: SchemaFile,
    bounds: Mapping[str, datetime | None],
    known: KnownTable | None,
    endpoint_url: str | None = None,
) -> list[RawFile]:
    """The CDC files of every schema-file table's folder named after its bound (each read with `known`); the
    folders are listed LISTING_THREADS at a time (each listing is a few S3 round trips)."""

    def table_files(name: str, spec: TableSpec) -> list[RawFile]:
        bound = bounds.get(name.lower())
        folder = table_folder(raw_path, spec.source_schema, spec.name)
        listed = list_since(folder, bound, endpoint_url)
        found = raw_cdc_files(((o.uri, o.size, o.last_modified) for o in listed), known)
        return [f for f in found if bound is None or f.written_at > bound]

    with ThreadPoolExecutor(LISTING_THREADS) as pool:
        found = pool.map(lambda item: table_files(*item), sorted(schema.tables.items()))
        files = [file for table in found for file in table]
    return sorted(files, key=lambda f: (f.written_at, f.uri))


def unapplied_by_table(
    spark: SparkSession,
    config: LakeConfig,
    schema: SchemaFile,
    raw_path: str,
    listed_at: datetime,
    after: datetime | None = None,
) -> dict[str, list[datetime]]:
    """Lower-case `schema.table` -> the name times of its CDC files not applied, not superseded by a reload
    and not quarantined whole (the raw audit's rules), among those named after the table's bound (module
    docstring; `after`: the last recorded point less the settle time)."""
    bounds = table_bounds(schema, previous_applied_through(spark, config), after)
    files = recent_files(raw_path, schema, bounds, raw_zone.known_of(schema), config.s3_endpoint_url)
    view = raw_zone.read_lake_view(spark, config, files, schema)
    verdicts = raw_zone.classify(
        files, view.applied, (), (), view.quarantined, view.loaded_at, listed_at, timedelta(0)
    )
    waiting: dict[str, list[datetime]] = {}
    for file, status in verdicts:
        if status not in ("applied", "quarantined", "superseded"):
            waiting.setdefault(file.table_key, []).append(file.written_at)
    return waiting
