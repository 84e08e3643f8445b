"""The pipeline's own records (ledger, tombstones, quarantine, freshness, consistent points, divergence) live
in a namespace of their own, out of any source name's reach: a source table named like one of them is an
ordinary clean table, and the records stay the pipeline's through full load, CDC and reload."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lakehouse.base.config import LakeConfig, parse_job_arguments
from lakehouse.base.names import history_database, records_database, table_name, tables_argument
from lakehouse.io.iceberg import SOURCE_TABLE, table_properties
from lakehouse.jobs.cdc import main as cdc_main
from lakehouse.jobs.full_load import main as full_load_main

from tests.support import DmsWriter, manifest, rows_of, schema_of

COLUMNS = ["id", "v"]
# Source tables whose clean names are, at the old place, the pipeline's records.
NAMED_LIKE_RECORDS = [
    "dms.applied_files",
    "DMS.Tombstones",
    "dms.quarantine",
    "lake.freshness",
    "consistent.points",
    "dms.divergence",
]
SCHEMA = schema_of({name: (["id"], [("id", "int"), ("v", "varchar(10)")]) for name in NAMED_LIKE_RECORDS})
NAMES = st.text(min_size=1, max_size=12)


@given(schema=NAMES, table=NAMES)
def test_no_source_table_maps_into_the_records_or_their_folder(schema: str, table: str) -> None:
    """Given any schema and table name, When the lake names its clean table, Then the table is in the clean
    namespace, never the records' (nor the histories'), and its name is never the records' folder name
    `_records` (on AWS the records database's location is `<warehouse>/_records/`, beside the clean tables)."""
    config = LakeConfig(clean_database="prod_clean")
    clean = config.clean_table(table_name(schema, table))
    assert clean.startswith("lake.prod_clean.") and clean.count(".") == 2
    assert clean not in {config.record_table(name) for name in config.record_names}
    assert not clean.startswith(
        (f"lake.{config.records_database}.", f"lake.{history_database('prod_clean')}.")
    )
    assert table_name(schema, table) not in ("_records", "_history")


def test_each_record_has_its_full_name_in_the_records_namespace() -> None:
    """Given a lake whose clean database is `prod_clean`, When its records are named, Then each is in
    `prod_clean_records` under its own name; the refined database may not be a namespace of the lake's."""
    config = LakeConfig(catalog_name="c", clean_database="prod_clean")
    assert config.records_database == records_database("prod_clean") == "prod_clean_records"
    assert (
        config.ledger,
        config.tombstones,
        config.quarantine,
        config.freshness,
        config.consistent_points,
        config.divergence,
    ) == tuple(
        f"c.prod_clean_records.{name}"
        for name in (
            "dms_applied_files",
            "dms_tombstones",
            "dms_quarantine",
            "lake_freshness",
            "consistent_points",
            "dms_divergence",
        )
    )
    for refined in ("prod_clean_records", "prod_clean_history", "prod_clean"):
        with pytest.raises(SystemExit):
            parse_job_arguments(["--clean_database", "prod_clean", "--refined_database", refined])


@pytest.mark.spark
def test_source_tables_named_like_the_records_are_replicas_and_the_records_stay_the_pipelines(
    spark, lake_config, tmp_path: Path
) -> None:
    """Given source tables whose clean names are the records' names (`dms.applied_files`, `DMS.Tombstones`,
    `dms.quarantine`, and tables named like freshness, consistent points and divergence),
    When the full load, a CDC run (update, delete, insert, a bad record; freshness and a consistent point
    recorded) and a reload of every table run through the job entry points,
    Then each source table is an ordinary clean table equal to its source, with its source recorded, and
    the records hold exactly the pipeline's rows: the CDC files applied, the deletes, the bad records, one
    freshness row and one point per table."""
    dms = DmsWriter(tmp_path / "raw")
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA.to_dict()))
    common = ["--warehouse", lake_config.warehouse, "--clean_database", lake_config.clean_database]
    common += ["--schema_file", str(schema_file)]
    for name in NAMED_LIKE_RECORDS:
        dms.load(name, COLUMNS, [(1, "a"), (2, "b"), (3, "c")])
    assert full_load_main([*common, "--raw_path", str(dms.root)]) == 0

    changes = [("U", (1, "A")), ("D", (2, None)), ("I", (4, "d")), ("X", (9, "bad"))]
    files = {name: dms.cdc(name, COLUMNS, changes) for name in NAMED_LIKE_RECORDS}
    batch = tmp_path / "batch.json"
    batch.write_text(json.dumps(manifest(*files.values(), run_id="cdc-1").to_dict()))
    arguments = ["--manifest", str(batch), "--raw_path", str(dms.root), "--consistent_points", "true"]
    assert cdc_main([*common, *arguments, "--consistency_settle_seconds", "0"]) == 0

    for (
        name
    ) in NAMED_LIKE_RECORDS:  # DMS reloads every table: it empties its folder, then writes new LOAD files
        for old in dms.table_dir(name).iterdir():
            old.unlink()
        dms.load(name, COLUMNS, [(1, "A"), (3, "c"), (4, "d"), (5, "e")], snapshot_seq=1000)
    reload = [
        "--raw_path",
        str(dms.root),
        "--reload",
        "true",
        "--tables",
        tables_argument(NAMED_LIKE_RECORDS),
    ]
    assert full_load_main([*common, *reload, "--run_id", "reload"]) == 0

    for name in NAMED_LIKE_RECORDS:
        clean = lake_config.clean_table(table_name(*name.split(".")))
        assert rows_of(spark, clean) == [(1, "A"), (3, "c"), (4, "d"), (5, "e")], name
        assert table_properties(spark, clean)[SOURCE_TABLE] == name
    ledger = rows_of(spark, lake_config.ledger, ["source_table", "file_name", "run_id"])
    assert ledger == sorted((name, Path(files[name]).name, "cdc-1") for name in NAMED_LIKE_RECORDS)
    tombstones = rows_of(spark, lake_config.tombstones, ["source_table", "key"])
    assert tombstones == sorted((name, '{"id":2}') for name in NAMED_LIKE_RECORDS)
    quarantined = rows_of(spark, lake_config.quarantine, ["source_table", "reason"])
    assert quarantined == sorted((name, "invalid Op X") for name in NAMED_LIKE_RECORDS)
    assert rows_of(spark, lake_config.freshness, ["source_table", "run_id"]) == sorted(
        (name, "cdc-1") for name in NAMED_LIKE_RECORDS
    )
    points = rows_of(spark, lake_config.consistent_points, ["source_table", "clean_table"])
    assert points == sorted((name, table_name(*name.split("."))) for name in NAMED_LIKE_RECORDS)
