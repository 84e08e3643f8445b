"""The Spark pipeline alone, end to end, on generated DMS files (no local AWS needed):

    python -m tools.demo_spark [--scale 0.5] [--batches 4] [--changes 400]

A TPC-DS-like source (SQLite) → DMS-format full-load files → full-load job → rounds of a change
workload rendered as DMS CDC files → one CDC run per round (one manifest each) → every clean table
checked against its source (row checksums). Prints what it did.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from lake_contracts.documents import Manifest, ManifestFile
from lake_contracts.run_report import RunReport
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.full_load import full_load
from lakehouse.apply.run import ApplyOptions
from lakehouse.base.config import LakeConfig
from lakehouse.base.schema import SchemaFile
from lakehouse.dms.reader import ReaderOptions
from lakehouse.io.session import build_session

from tools import sample_data
from tools.dms_csv import CsvFormat
from tools.schema_gen import reflect_schema
from tools.verify import check_all

NULL_MARKER = "NULL"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", default="var/demo-spark")
    parser.add_argument("--scale", type=float, default=0.5)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--changes", type=int, default=400, help="business operations per batch")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)

    started = time.monotonic()
    work = Path(args.workdir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    raw = work / "raw" / "dms"
    db = work / "source.db"
    fmt = CsvFormat(csv_null_value=NULL_MARKER)
    options = ApplyOptions(reader=ReaderOptions(csv_null_value=NULL_MARKER))

    counts = sample_data.create_source_database(db, args.scale, args.seed)
    schema = SchemaFile.from_dict(reflect_schema(f"sqlite:///{db}", [sample_data.SOURCE_SCHEMA]))
    print(f"source: {db} {counts}")
    loads = sample_data.write_full_load_files(db, raw, fmt=fmt)
    print(f"DMS full load: {len(loads)} LOAD files")

    config = LakeConfig(warehouse=str(work / "warehouse"), staging_dir=str(work / "staging"))
    spark = build_session(config, "demo-spark")
    report = full_load(spark, config, schema, str(raw), options=options)
    print(
        f"full load: {report.totals()['inserted_or_updated']} rows into {len(report.tables)} tables "
        f"in {report.seconds:.1f}s"
    )

    next_seq = 1
    for batch in range(1, args.batches + 1):
        workload = sample_data.run_workload(db, args.changes, args.seed + batch)
        files = sample_data.write_cdc_files(db, workload.changes, raw, first_change_seq=next_seq, fmt=fmt)
        next_seq += len(workload.changes)
        manifest = Manifest(f"batch-{batch}", [ManifestFile(f) for f in files])
        result = apply_cdc(spark, config, schema, manifest, options)
        print(batch_line(batch, len(files), len(workload.changes), result))
        if result.failed:
            print(f"FAILED tables: {[(t.table, t.error) for t in result.failed]}", file=sys.stderr)
            return 1

    print("\nverification: every clean table against its source")
    checks = check_all(spark, config, schema, db)
    for check in checks:
        print("  " + check.line())
    ok = all(c.matches for c in checks)
    print(
        f"\n{'ALL TABLES MATCH' if ok else 'MISMATCH'} in {time.monotonic() - started:.0f}s; "
        f"warehouse: {config.warehouse}"
    )
    return 0 if ok else 1


def batch_line(batch: int, files: int, changes: int, result: RunReport) -> str:
    """What a CDC run did to one batch, with the commit time of the newest change it applied."""
    totals = result.totals()
    newest = result.newest_commit_ts
    lag = ""
    if newest:
        lag = f", newest change committed {datetime.fromisoformat(newest).replace(tzinfo=UTC):%Y-%m-%d %H:%M:%S}"
    return (
        f"batch {batch}: {files} files, {changes} row changes → "
        f"{totals['inserted_or_updated']} upserts, {totals['deleted']} deletes, "
        f"{totals['quarantined_records']} quarantined, in {result.seconds:.1f}s{lag}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
