"""The lake the benchmarks run on: each table built once by the full load and put back to that base
snapshot before every measured run, the rows a batch should leave, and a batch applied as one CDC job
process (a Glue run) or in a warm session."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from datasets import DATA, Dataset
from generate import NARROW, SOURCE_SCHEMA, cdc_ops_and_keys
from timings import Figure, timed

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
CDC_JOB = ROOT / "spark_jobs" / "cdc_job.py"

# ---------------------------------------------------------------- the table and its base snapshot


@dataclass(frozen=True)
class Lake:
    warehouse: Path
    schema_file: Path
    shuffle_partitions: int

    def database(self, rows: int, fmt: str = "csv") -> str:
        return f"rows_{rows}" if fmt == "csv" else f"rows_{rows}_{fmt}"

    def table_dir(self, database: str, table: str) -> Path:
        return self.warehouse / database / f"{SOURCE_SCHEMA}_{table}"

    def config(self, database: str):
        from lakehouse.base.config import LakeConfig

        return LakeConfig(
            warehouse=str(self.warehouse),
            clean_database=database,
            schema_file=str(self.schema_file),
            staging_dir=str(DATA / "staging"),
            shuffle_partitions=self.shuffle_partitions,
        )

    def job_arguments(self, database: str) -> list[str]:
        return [
            "--catalog_type", "hadoop",
            "--warehouse", str(self.warehouse),
            "--clean_database", database,
            "--schema_file", str(self.schema_file),
            "--staging_dir", str(DATA / "staging"),
            "--shuffle_partitions", str(self.shuffle_partitions),
        ]  # fmt: skip


def backup_dir(table_dir: Path) -> Path:
    return DATA / "base-metadata" / table_dir.parent.name / table_dir.name


# The pipeline's own tables (in the records' namespace, `<clean>_records`: lakehouse.base.names.records_database):
# which files it applied, which keys it deleted. A batch applied again after a restore must find them as they
# were after the full load, or it is skipped.
STATE_TABLES = ("dms_applied_files", "dms_tombstones")
RECORDS_SUFFIX = "_records"


def state_folders(table_dir: Path) -> list[Path]:
    """The folders of the pipeline's own tables of the replica in `table_dir` (a hadoop warehouse)."""
    records = table_dir.parent.with_name(table_dir.parent.name + RECORDS_SUFFIX)
    return [records / name for name in STATE_TABLES]


def backup_base(table_dir: Path) -> None:
    """Keep the metadata of the table and of the pipeline's own tables as they are after the full load."""
    for folder in (table_dir, *state_folders(table_dir)):
        if (folder / "metadata").exists():
            shutil.copytree(folder / "metadata", backup_dir(folder))


def restore(table_dir: Path) -> None:
    """Put the table (and the pipeline's own tables) back to the base snapshot after the full load."""
    for folder in (table_dir, *state_folders(table_dir)):
        backup = backup_dir(folder)
        if backup.exists():
            shutil.rmtree(folder / "metadata", ignore_errors=True)
            shutil.copytree(backup, folder / "metadata")


def base_metadata_json(table_dir: Path) -> Path:
    hint = (table_dir / "metadata" / "version-hint.text").read_text().strip()
    return table_dir / "metadata" / f"v{hint}.metadata.json"


def build_base(spark, lake: Lake, dataset: Dataset, figures: list[Figure]) -> Path:
    """Full-load the dataset's table once (timed: the 10M-row full-load figure) and keep its metadata."""
    from lakehouse.apply.full_load import full_load
    from lakehouse.base.schema import SchemaFile

    database = lake.database(dataset.rows, dataset.fmt)
    table_dir = lake.table_dir(database, NARROW)
    if backup_dir(table_dir).exists():
        return table_dir
    raw = dataset.load_raw
    schema = SchemaFile.from_dict(json.loads(lake.schema_file.read_text()))
    figure = Figure(
        f"full-load-base (narrow, {dataset.fmt})",
        dataset.rows,
        dataset.rows,
        "rows",
        note="one run: builds the base",
    )
    report = timed(
        figure,
        lambda: full_load(
            spark, lake.config(database), schema, str(raw), [f"{SOURCE_SCHEMA}.{NARROW}"], reload=True
        ),
    )
    if report.failed:
        raise RuntimeError(f"full load failed: {report.failed}")
    figures.append(figure)
    backup_base(table_dir)
    return table_dir


def expected_rows(dataset: Dataset) -> int:
    """Rows after applying the batch, from the generator's ops and keys (no Iceberg involved)."""
    ops, keys = cdc_ops_and_keys(dataset.cdc_spec)
    frame = pa.table({"key": keys, "deleted": pa.array(ops == "D")})
    last = frame.group_by("key", use_threads=False).aggregate([("deleted", "last")])
    deleted = last["deleted_last"]
    existing = pc.less_equal(last["key"], dataset.rows)
    removed = pc.sum(pc.and_(existing, deleted).cast(pa.int64())).as_py() or 0
    added = pc.sum(pc.and_(pc.invert(existing), pc.invert(deleted)).cast(pa.int64())).as_py() or 0
    return dataset.rows - removed + added


# ---------------------------------------------------------------- manifests and job processes


def write_manifest(name: str, files: Sequence[Path]) -> Path:
    path = DATA / "manifests" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "version": 1,
        "run_id": name,
        "files": [{"uri": str(f), "size": f.stat().st_size} for f in files],
    }
    path.write_text(json.dumps(document))
    return path


def run_job(
    manifest: Path, lake: Lake, database: str, driver_memory: str, spark_conf: Sequence[str] = ()
) -> dict[str, Any]:
    """One CDC job process, as one Glue run: JVM start, session, apply, exit. Returns its report.
    `spark_conf` (KEY=VALUE) is passed to the process's Spark as `--conf`."""
    env = os.environ | {"LAKE_SPARK_DRIVER_MEMORY": driver_memory, "PYTHONPATH": str(ROOT / "spark_jobs")}
    if spark_conf:
        env["PYSPARK_SUBMIT_ARGS"] = " ".join(f"--conf {c}" for c in spark_conf) + " pyspark-shell"
    done = subprocess.run(
        [PYTHON, str(CDC_JOB), "--manifest", str(manifest), *lake.job_arguments(database)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"cdc job failed ({done.returncode}): {done.stderr[-3000:]}")
    return json.loads(done.stdout[done.stdout.index("{") :])


# ---------------------------------------------------------------- the apply in a warm session


def spark_session(lake: Lake, driver_memory: str):
    os.environ["LAKE_SPARK_DRIVER_MEMORY"] = driver_memory
    from lakehouse.io.session import APPLY_TUNING, build_session

    return build_session(lake.config("bench"), "bench", APPLY_TUNING)


def apply_in_session(spark, lake: Lake, database: str, files: Sequence[Path], run_id: str):
    from lake_contracts.documents import Manifest, ManifestFile
    from lakehouse.apply.cdc import apply_cdc
    from lakehouse.base.schema import SchemaFile

    schema = SchemaFile.from_dict(json.loads(lake.schema_file.read_text()))
    manifest = Manifest(run_id, [ManifestFile(str(f), f.stat().st_size) for f in files])
    report = apply_cdc(spark, lake.config(database), schema, manifest)
    if report.failed:
        raise RuntimeError(f"apply failed: {report.failed[0].error}")
    return report


def table_name(lake: Lake, database: str) -> str:
    return f"lake.{database}.{SOURCE_SCHEMA}_{NARROW}"


def refreshed(spark, table: str) -> None:
    """Forget the cached metadata of the table and of the pipeline's own tables (a restore replaced their
    metadata folders)."""
    database = table.rsplit(".", 1)[0]
    for name in (table, *(f"{database}{RECORDS_SUFFIX}.{state}" for state in STATE_TABLES)):
        if spark.catalog.tableExists(name):
            spark.sql(f"REFRESH TABLE {name}")


def reset_table(spark, table_dir: Path, table: str) -> None:
    """The table (and the pipeline's own tables) back at the base snapshot, nothing an earlier run kept cached (a
    variant's, or the last run's reads of the tables)."""
    spark.catalog.clearCache()
    restore(table_dir)
    refreshed(spark, table)


def check_rows(spark, table: str, expected: int, label: str) -> None:
    """The table holds the rows the batch should leave (`expected_rows`)."""
    refreshed(spark, table)
    count = spark.table(table).count()
    if count != expected:
        raise RuntimeError(f"{label}: {count} rows after the batch, expected {expected}")
