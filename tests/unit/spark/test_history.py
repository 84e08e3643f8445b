"""Row history (SCD type 2) on whole tables: the history table equals an oracle built from
every change delivered so far, whatever the order, with late files, replays, retries, deletes and
re-inserts, a reload, and a failure between the history's commit and the clean table's."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from lake_contracts.dms_files import cdc_file_name, change_seq
from lakehouse.apply import cdc as cdc_apply
from lakehouse.apply import history
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.full_load import full_load
from lakehouse.base.names import history_database
from lakehouse.base.schema import SchemaFile
from lakehouse.maintenance.run import MaintenanceOptions, maintain

from tests.support import DmsWriter, manifest, rows_of, snapshot_count
from tests.unit.spark.test_history_rules import T0, Change, current_rows, history_order, oracle_history
from tools.dms_csv import write_dms_csv
from tools.emr_serverless_asl import load_template

pytestmark = pytest.mark.spark

TABLE = "shop.item"
COLUMNS = ["id", "price", "label"]
HISTORY_COLUMNS = [*COLUMNS, "valid_from", "valid_to", "change_seq", "operation", "is_current"]


def schema(history_flag: bool = True, table: str = TABLE, columns: Sequence[str] = COLUMNS) -> SchemaFile:
    types = {columns[0]: "int", columns[1]: "int", columns[2]: "varchar(20)"}
    return SchemaFile.from_dict(
        {
            "dialect": "mysql",
            "tables": {
                table: {
                    "primary_key": [columns[0]],
                    "columns": [{"name": c, "type": types[c]} for c in columns],
                    "history": history_flag,
                }
            },
        }
    )


SCHEMA = schema()
LOADED = {1: (10, "one"), 2: (20, "two")}
# One source's changes, in the order it made them: updates, a delete and a re-insert, a delete of a key
# never seen and an update of it (an upsert); a delete's record carries its before image, which the
# history does not keep.
STREAM = [
    Change(1, "U", 1, 11, "one b"),
    Change(2, "I", 3, 30, "three"),
    Change(3, "U", 2, 21, None),
    Change(4, "D", 1, 11, "one b"),
    Change(5, "U", 3, 31, "three b"),
    Change(6, "I", 1, 12, "one again"),
    Change(7, "D", 4, 0, "x"),
    Change(8, "U", 4, 40, "four"),
    Change(9, "U", 3, 32, "three c"),
    Change(10, "D", 2, 21, None),
    Change(11, "U", 1, 13, "one c"),
    Change(12, "I", 2, 22, "two again"),
]
FILES = [STREAM[0:2], STREAM[2:4], STREAM[4:7], STREAM[7:8], STREAM[8:10], STREAM[10:12]]


def write_cdc(
    root: Path, changes: Sequence[Change], table: str = TABLE, columns: Sequence[str] = COLUMNS
) -> str:
    """A DMS CDC file of `changes`, each with its own sequence and commit time, named by the first one's."""
    schema_name, name = table.split(".")
    folder = root / schema_name / name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / cdc_file_name(min(c.at for c in changes))
    rows = [(c.op, change_seq(c.seq), c.at, (c.key, c.price, c.label)) for c in changes]
    path.write_text(write_dms_csv(columns, rows), encoding="utf-8")
    return str(path)


def history_of(config, clean: str = "shop_item") -> str:
    """The history table of the clean table `clean` (the histories' namespace)."""
    return config.table(history_database(config.clean_database), clean)


def history_rows(
    spark, config, clean: str = "shop_item", columns: Sequence[str] = HISTORY_COLUMNS
) -> list[tuple]:
    """The whole history table, ordered by key, valid_from, change_seq."""
    frame = spark.table(history_of(config, clean)).select(*columns)
    return sorted((tuple(r) for r in frame.collect()), key=history_order)


def loaded_lake(spark, lake_config, tmp_path: Path, schema_file: SchemaFile = SCHEMA) -> Path:
    root = tmp_path / "dms"
    DmsWriter(root).load(TABLE, COLUMNS, [(k, *v) for k, v in LOADED.items()], moment=T0)
    assert full_load(spark, lake_config, schema_file, str(root)).ok
    return root


def test_in_order_every_change_is_a_version(spark, lake_config, tmp_path: Path) -> None:
    """Given a loaded table that keeps its history
    When the stream's files are applied in order, two per batch
    Then after every batch the history equals the oracle of the changes so far (the load's rows first,
    every change a version until the next one, deletes holding the key only), its current versions are
    the clean table, and maintenance compacts it without changing a row."""
    root = loaded_lake(spark, lake_config, tmp_path)
    paths = [write_cdc(root, f) for f in FILES]
    assert history_rows(spark, lake_config) == oracle_history(LOADED, T0, [])

    delivered: list[Change] = []
    for number in range(0, len(FILES), 2):
        report = apply_cdc(
            spark, lake_config, SCHEMA, manifest(*paths[number : number + 2], run_id=f"b{number}")
        )
        assert report.ok, (report.failed, report.error)
        delivered += FILES[number] + FILES[number + 1]
        expected = oracle_history(LOADED, T0, delivered)
        assert history_rows(spark, lake_config) == expected
        assert rows_of(spark, lake_config.clean_table("shop_item")) == current_rows(expected)

    before = history_rows(spark, lake_config)
    options = MaintenanceOptions(min_input_files=2, remove_orphans=False)
    maintained = maintain(spark, lake_config, options, run_id="m")
    [entry] = [t for t in maintained.tables if t.table == history_of(lake_config)]
    assert entry.error is None and entry.delete_files_before > 0
    assert (entry.data_files_after, entry.delete_files_after) == (1, 0)
    assert history_rows(spark, lake_config) == before


def test_any_order_late_files_replays_and_retries(spark, lake_config, tmp_path: Path) -> None:
    """Given the same stream's files
    When they are delivered out of order (the last first), some batches with files applied before again
    (a replay) and one batch run twice (a retry)
    Then after every batch the history equals the oracle of the changes delivered so far: each late
    change spliced where its sequence belongs, nothing doubled."""
    root = loaded_lake(spark, lake_config, tmp_path)
    paths = [write_cdc(root, f) for f in FILES]
    batches = [[5], [2, 0], [4, 5], [1], [3, 0]]

    delivered: set[int] = set()
    for number, batch in enumerate(batches):
        report = apply_cdc(
            spark, lake_config, SCHEMA, manifest(*[paths[i] for i in batch], run_id=f"b{number}")
        )
        assert report.ok, (report.failed, report.error)
        if number == 3:
            kept = snapshot_count(spark, history_of(lake_config))
            retry = apply_cdc(spark, lake_config, SCHEMA, manifest(paths[1], run_id="retry"))
            assert retry.ok and retry.tables[0].skipped_already_applied == 1
            assert snapshot_count(spark, history_of(lake_config)) == kept
        delivered |= set(batch)
        expected = oracle_history(LOADED, T0, [c for i in sorted(delivered) for c in FILES[i]])
        assert history_rows(spark, lake_config) == expected, f"after batch {number}"
        assert rows_of(spark, lake_config.clean_table("shop_item")) == current_rows(expected)


def test_a_late_change_splits_the_version_it_falls_in(spark, lake_config, tmp_path: Path) -> None:
    """Given key 7 inserted (sequence 1) and updated (3), and a delete (4) then its late older update (2)
    When the update of sequence 2 arrives last, in its own batch
    Then it ends the insert's version and is ended by the update of sequence 3; the delete stays current."""
    root = tmp_path / "dms"
    first = write_cdc(root, [Change(1, "I", 7, 1, "a"), Change(3, "U", 7, 3, "c"), Change(4, "D", 7, 3, "c")])
    late = write_cdc(root, [Change(2, "U", 7, 2, "b")])

    assert apply_cdc(spark, lake_config, SCHEMA, manifest(first, run_id="first")).ok
    assert apply_cdc(spark, lake_config, SCHEMA, manifest(late, run_id="late")).ok

    t = {s: T0 + timedelta(seconds=s) for s in (1, 2, 3, 4)}
    assert history_rows(spark, lake_config) == [
        (7, 1, "a", t[1], t[2], Decimal(1), "I", False),
        (7, 2, "b", t[2], t[3], Decimal(2), "U", False),
        (7, 3, "c", t[3], t[4], Decimal(3), "U", False),
        (7, None, None, t[4], None, Decimal(4), "D", True),
    ]
    assert rows_of(spark, lake_config.clean_table("shop_item")) == []


def test_a_failure_between_the_two_commits_is_repaired_by_the_retry(
    spark, lake_config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given a batch whose clean commit fails after its history commit, and a batch whose history commit
    fails (so its clean commit never happens)
    When each batch is retried
    Then the retry commits the clean table, the history holds every version exactly once (the first
    retry writes no history commit at all), and both equal the oracle."""
    root = loaded_lake(spark, lake_config, tmp_path)
    paths = [write_cdc(root, f) for f in FILES]
    history_table = history_of(lake_config)

    def broken(*args, **kwargs):
        raise RuntimeError("the clean commit failed")

    with monkeypatch.context() as patch:
        patch.setattr(cdc_apply, "merge_changes", broken)
        patch.setattr(cdc_apply, "append_rows", broken)
        failed = apply_cdc(spark, lake_config, SCHEMA, manifest(paths[0], paths[1], run_id="one"))
    assert not failed.ok and "the clean commit failed" in failed.tables[0].error
    assert rows_of(spark, lake_config.clean_table("shop_item")) == sorted((k, *v) for k, v in LOADED.items())
    spliced = history_rows(spark, lake_config)
    assert spliced == oracle_history(LOADED, T0, FILES[0] + FILES[1])
    commits = snapshot_count(spark, history_table)

    assert apply_cdc(spark, lake_config, SCHEMA, manifest(paths[0], paths[1], run_id="one")).ok
    assert snapshot_count(spark, history_table) == commits
    assert history_rows(spark, lake_config) == spliced
    assert rows_of(spark, lake_config.clean_table("shop_item")) == current_rows(spliced)

    def no_history(*args, **kwargs):
        raise RuntimeError("the history commit failed")

    with monkeypatch.context() as patch:
        patch.setattr(history, "write_versions", no_history)
        failed = apply_cdc(spark, lake_config, SCHEMA, manifest(paths[2], run_id="two"))
    assert not failed.ok and "the history commit failed" in failed.tables[0].error
    assert rows_of(spark, lake_config.clean_table("shop_item")) == current_rows(spliced)

    assert apply_cdc(spark, lake_config, SCHEMA, manifest(paths[2], run_id="two")).ok
    expected = oracle_history(LOADED, T0, FILES[0] + FILES[1] + FILES[2])
    assert history_rows(spark, lake_config) == expected
    assert rows_of(spark, lake_config.clean_table("shop_item")) == current_rows(expected)


def test_a_reload_closes_what_it_removed_and_opens_what_it_loaded(spark, lake_config, tmp_path: Path) -> None:
    """Given a loaded table with history, CDC changes (sequences 1-3, and 12), then a reload whose LOAD rows
    DMS stamped with sequence 10, then a late change below the reload (5) and a newer one (13)
    When they are applied, and the reload is run a second time
    Then the history holds: the reload's LOAD version of each row it took, a D version (at the reload's
    sequence and start) for each row it removed, nothing for the row it kept (changed after it) nor for the
    late change the reload holds already; the second reload changes nothing."""
    root = tmp_path / "dms"
    dms = DmsWriter(root)
    dms.load(TABLE, COLUMNS, [(1, 10, "one"), (2, 20, "two"), (3, 30, "three")], moment=T0)
    assert full_load(spark, lake_config, SCHEMA, str(root)).ok
    before = write_cdc(
        root, [Change(1, "U", 1, 11, "a1"), Change(2, "U", 2, 21, "a2"), Change(3, "I", 4, 41, "a4")]
    )
    newer = write_cdc(root, [Change(12, "U", 2, 22, "b2")])
    assert apply_cdc(spark, lake_config, SCHEMA, manifest(before, newer, run_id="before")).ok
    r = T0 + timedelta(seconds=10)
    dms.load(TABLE, COLUMNS, [(1, 12, "r1"), (2, 20, "r2"), (5, 50, "r5")], snapshot_seq=10, moment=r)

    assert full_load(spark, lake_config, SCHEMA, str(root), reload=True, run_id="reload").ok
    late = write_cdc(root, [Change(5, "U", 3, 33, "c3")])
    after = write_cdc(root, [Change(13, "U", 4, 44, "d4")])
    assert apply_cdc(spark, lake_config, SCHEMA, manifest(late, after, run_id="after")).ok

    t = {s: T0 + timedelta(seconds=s) for s in (1, 2, 3, 12, 13)}
    expected = [
        (1, 10, "one", T0, t[1], None, "LOAD", False),
        (1, 11, "a1", t[1], r, Decimal(1), "U", False),
        (1, 12, "r1", r, None, Decimal(10), "LOAD", True),
        (2, 20, "two", T0, t[2], None, "LOAD", False),
        (2, 21, "a2", t[2], t[12], Decimal(2), "U", False),
        (2, 22, "b2", t[12], None, Decimal(12), "U", True),
        (3, 30, "three", T0, r, None, "LOAD", False),
        (3, None, None, r, None, Decimal(10), "D", True),
        (4, 41, "a4", t[3], r, Decimal(3), "I", False),
        (4, None, None, r, t[13], Decimal(10), "D", False),
        (4, 44, "d4", t[13], None, Decimal(13), "U", True),
        (5, 50, "r5", r, None, Decimal(10), "LOAD", True),
    ]
    assert history_rows(spark, lake_config) == expected
    assert rows_of(spark, lake_config.clean_table("shop_item")) == current_rows(expected)

    commits = snapshot_count(spark, history_of(lake_config))
    assert full_load(spark, lake_config, SCHEMA, str(root), reload=True, run_id="reload-again").ok
    assert history_rows(spark, lake_config) == expected
    assert snapshot_count(spark, history_of(lake_config)) == commits


def test_history_asked_for_later_starts_from_the_table_as_it_is(spark, lake_config, tmp_path: Path) -> None:
    """Given a table loaded and changed without history
    When history is asked for (--history_tables) and the next batch is applied
    Then the history opens with one LOAD version per row the table held (its change sequence and commit
    time), then the batch's versions."""
    without = schema(history_flag=False)
    root = loaded_lake(spark, lake_config, tmp_path, without)
    assert apply_cdc(spark, lake_config, without, manifest(write_cdc(root, [Change(1, "U", 1, 11, "a")]))).ok
    later = history.with_history(without, history.parse_history_tables("shop.item"))

    batch = write_cdc(root, [Change(2, "U", 1, 12, "b"), Change(3, "I", 3, 30, "x")])
    assert apply_cdc(spark, lake_config, later, manifest(batch, run_id="with-history")).ok

    t = {s: T0 + timedelta(seconds=s) for s in (1, 2, 3)}
    assert history_rows(spark, lake_config) == [
        (1, 11, "a", t[1], t[2], Decimal(1), "LOAD", False),
        (1, 12, "b", t[2], None, Decimal(2), "U", True),
        (2, 20, "two", T0, None, None, "LOAD", True),
        (3, 30, "x", t[3], None, Decimal(3), "I", True),
    ]


def test_the_athena_named_queries_run_in_spark(spark, lake_config, tmp_path: Path) -> None:
    """Given a customer table with history, a row updated twice and deleted
    When the template's named queries (row as of T, all versions of one key) run in Spark, their SQL as
    the template has it, with `?` parameters
    Then the first gives the version valid at T (none after the delete, none before the insert) and the
    second every version of the key in sequence order."""
    columns = ["c_customer_sk", "c_email", "c_name"]
    customers = schema(table="public.customer", columns=columns)
    root = tmp_path / "dms"
    changes = [Change(1, "I", 8, 1, "a"), Change(2, "U", 8, 2, "b"), Change(3, "D", 8, 2, "b")]
    changes += [Change(4, "I", 9, 9, "z")]
    path = write_cdc(root, changes, "public.customer", columns)
    assert apply_cdc(spark, lake_config, customers, manifest(path)).ok
    resources = load_template()["Resources"]

    def sql(name: str) -> str:
        text, _ = resources[name]["Properties"]["QueryString"]["Fn::Sub"]
        names = {
            "${clean_db}": f"{lake_config.catalog_name}.{lake_config.clean_database}",
            "${history_db}": f"{lake_config.catalog_name}.{history_database(lake_config.clean_database)}",
            "${SourceSchema}": "public",
        }
        for placeholder, value in names.items():
            text = text.replace(placeholder, value)
        return text

    def row_at(second: float) -> list[tuple]:
        moment = (T0 + timedelta(seconds=second)).strftime("%Y-%m-%d %H:%M:%S.%f")
        found = spark.sql(sql("HistoryQueryRowAsOf"), args=[8, moment, moment]).collect()
        return [(r["c_customer_sk"], r["c_email"], r["c_name"], r["operation"]) for r in found]

    assert row_at(0.5) == []
    assert row_at(1) == [(8, 1, "a", "I")]
    assert row_at(2.5) == [(8, 2, "b", "U")]
    assert row_at(3) == []
    versions = spark.sql(sql("HistoryQueryVersionsOfKey"), args=[8]).collect()
    assert [(r["c_email"], r["operation"], r["change_seq"], r["is_current"]) for r in versions] == [
        (1, "I", Decimal(1), False),
        (2, "U", Decimal(2), False),
        (None, "D", Decimal(3), True),
    ]
