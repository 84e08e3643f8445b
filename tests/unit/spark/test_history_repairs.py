"""Row history where names collide and where tables are changed outside the loop: a source table
named like another one's history keeps its own rows (the histories have their own namespace), and the
repairs (the reconcile's emptying of a table whose source is empty, the re-application of a quarantined
file) keep the history equal to what the table went through, --history_tables given or not."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from lake_contracts.dms_files import cdc_file_name, change_seq
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.clean_table import sequence_at
from lakehouse.apply.full_load import full_load
from lakehouse.apply.reapply import reapply_quarantined
from lakehouse.base.schema import SchemaFile
from lakehouse.io.iceberg import table_exists
from lakehouse.reconcile.run import empty_clean_table

from tests.support import DmsWriter, manifest, rows_of
from tests.unit.spark.test_history import COLUMNS, LOADED, TABLE, history_of, history_rows, write_cdc
from tests.unit.spark.test_history_rules import T0, Change, current_rows, oracle_history
from tools.dms_csv import write_dms_csv

pytestmark = pytest.mark.spark

TWIN = "shop.item_history"  # a name any source database accepts: its clean name was item's history's
PLAIN = "shop.plain"


def schema_of(*tables: str, history: bool = True) -> SchemaFile:
    """`tables` (columns id, price, label; key id), each keeping its history or none."""
    types = {"id": "int", "price": "int", "label": "varchar(20)"}
    return SchemaFile.from_dict(
        {
            "dialect": "mysql",
            "tables": {
                table: {
                    "primary_key": ["id"],
                    "columns": [{"name": c, "type": types[c]} for c in COLUMNS],
                    "history": history,
                }
                for table in tables
            },
        }
    )


def test_a_table_named_like_another_tables_history_keeps_its_own_rows(spark, lake_config, tmp_path: Path):
    """Given a source with `shop.item` and `shop.item_history` (clean names shop_item, shop_item_history),
    both keeping their history
    When both are loaded and each gets its own changes (updates, a delete, an insert), in two batches
    Then each clean table equals its own oracle's current rows and each history its own oracle: no table
    holds the other's rows (before, item's history was the clean table shop_item_history)."""
    both = schema_of(TABLE, TWIN)
    root = tmp_path / "dms"
    twin_loaded = {1: (99, "twin one"), 7: (70, "seven")}
    dms = DmsWriter(root)
    dms.load(TABLE, COLUMNS, [(k, *v) for k, v in LOADED.items()], moment=T0)
    dms.load(TWIN, COLUMNS, [(k, *v) for k, v in twin_loaded.items()], moment=T0)
    assert full_load(spark, lake_config, both, str(root)).ok
    item_changes = [
        Change(1, "U", 1, 11, "one b"),
        Change(2, "I", 3, 30, "three"),
        Change(4, "D", 2, 20, "two"),
    ]
    twin_changes = [
        Change(3, "U", 7, 71, "seven b"),
        Change(5, "D", 1, 99, "twin one"),
        Change(6, "I", 8, 80, "x"),
    ]
    first = [write_cdc(root, item_changes[:2]), write_cdc(root, twin_changes[:1], TWIN)]
    second = [write_cdc(root, item_changes[2:]), write_cdc(root, twin_changes[1:], TWIN)]

    for number, paths in enumerate((first, second)):
        report = apply_cdc(spark, lake_config, both, manifest(*paths, run_id=f"b{number}"))
        assert report.ok, (report.failed, report.error)

    for clean, loaded, changes in (
        ("shop_item", LOADED, item_changes),
        ("shop_item_history", twin_loaded, twin_changes),
    ):
        expected = oracle_history(loaded, T0, changes)
        assert history_rows(spark, lake_config, clean) == expected, clean
        assert rows_of(spark, lake_config.clean_table(clean)) == current_rows(expected), clean


def write_shaped_cdc(root: Path, table: str, changes: list[tuple[str, int, int, str | None, float]]) -> str:
    """A CDC file whose changes carry DMS-shaped sequences (the time of each change, as AR_H_CHANGE_SEQ):
    `changes` are (op, key, price, label, seconds after T0)."""
    schema_name, name = table.split(".")
    folder = root / schema_name / name
    folder.mkdir(parents=True, exist_ok=True)
    first = T0 + timedelta(seconds=min(c[4] for c in changes))
    path = folder / cdc_file_name(first)
    rows = []
    for op, key, price, label, seconds in changes:
        at = T0 + timedelta(seconds=seconds)
        rows.append((op, str(int(sequence_at(at))).zfill(35), at, (key, price, label)))
    path.write_text(write_dms_csv(COLUMNS, rows), encoding="utf-8")
    return str(path)


def test_the_reconciles_emptying_closes_the_history_of_what_it_removed(spark, lake_config, tmp_path: Path):
    """Given `shop.item` loaded with its history (rows 1, 2, 3), key 1 updated before the check and key 2
    after it, and `shop.plain` loaded without history
    When the reconcile empties both (their sources were TRUNCATEd), seeing the schema file without
    `history` (the reconcile job is not given --history_tables)
    Then item's history closes rows 1 and 3 with a D version at the repair's floor and the check's time, row
    2 (changed after the check, kept) stays current; the history's current versions are the clean table;
    `shop.plain` gets no history."""
    root = tmp_path / "dms"
    dms = DmsWriter(root)
    dms.load(TABLE, COLUMNS, [(1, 10, "one"), (2, 20, "two"), (3, 30, "three")], moment=T0)
    dms.load(PLAIN, COLUMNS, [(1, 1, "p")], moment=T0)
    plain_only = schema_of(PLAIN, history=False)
    assert full_load(spark, lake_config, schema_of(TABLE), str(root)).ok
    assert full_load(spark, lake_config, plain_only, str(root)).ok
    changes = write_shaped_cdc(root, TABLE, [("U", 1, 11, "a", 1), ("U", 2, 21, "b", 100)])
    assert apply_cdc(spark, lake_config, schema_of(TABLE), manifest(changes)).ok
    t0 = T0 + timedelta(seconds=50)
    placed = Decimal(int(sequence_at(t0)))

    without = schema_of(TABLE, PLAIN, history=False)  # what the reconcile job reads
    for table in (TABLE, PLAIN):
        empty_clean_table(spark, lake_config, without.tables[table], t0, "reconcile-1", margin_seconds=0)

    at = {s: T0 + timedelta(seconds=s) for s in (1, 100)}
    expected = [
        (1, 10, "one", T0, at[1], None, "LOAD", False),
        (1, 11, "a", at[1], t0, Decimal(int(sequence_at(at[1]))), "U", False),
        (1, None, None, t0, None, placed, "D", True),
        (2, 20, "two", T0, at[100], None, "LOAD", False),
        (2, 21, "b", at[100], None, Decimal(int(sequence_at(at[100]))), "U", True),
        (3, 30, "three", T0, t0, None, "LOAD", False),
        (3, None, None, t0, None, placed, "D", True),
    ]
    assert history_rows(spark, lake_config) == expected
    assert rows_of(spark, lake_config.clean_table("shop_item")) == current_rows(expected) == [(2, 21, "b")]
    assert rows_of(spark, lake_config.clean_table("shop_plain")) == []
    assert not table_exists(spark, history_of(lake_config, "shop_plain"))


def test_a_reapplied_quarantined_file_reaches_the_history(spark, lake_config, tmp_path: Path):
    """Given `shop.item` with its history, a CDC file (changes 1-3) whose record of change 2 (the insert of
    key 3) is malformed and quarantined, and a later file (changes 4-5: an update of key 1, the delete of
    key 3)
    When the file is fixed and re-applied with a schema file that does not mark the history (the command
    run without --history_tables)
    Then the history holds every change of both files where its sequence belongs (key 3's insert spliced
    before its delete), equal to the oracle, and its current versions are the clean table."""
    root = loaded_with_history(spark, lake_config, tmp_path)
    early = [Change(1, "U", 1, 11, "a"), Change(2, "I", 3, 30, "three"), Change(3, "U", 2, 21, "b")]
    later = [Change(4, "U", 1, 12, "a2"), Change(5, "D", 3, 30, "three")]
    path = write_cdc(root, early)
    fixed_text = Path(path).read_text(encoding="utf-8")
    broken = [line + ",extra" if change_seq(2) in line else line for line in fixed_text.splitlines()]
    Path(path).write_text("\n".join(broken) + "\n", encoding="utf-8")
    first = apply_cdc(spark, lake_config, schema_of(TABLE), manifest(path, write_cdc(root, later)))
    assert first.ok and first.tables[0].quarantined_records == 1
    assert history_rows(spark, lake_config) == oracle_history(LOADED, T0, [early[0], early[2], *later])

    Path(path).write_text(fixed_text, encoding="utf-8")
    report = reapply_quarantined(spark, lake_config, schema_of(TABLE, history=False), files=[path])

    assert report.ok and report.files == [path], report.to_dict()
    expected = oracle_history(LOADED, T0, early + later)
    assert history_rows(spark, lake_config) == expected
    assert rows_of(spark, lake_config.clean_table("shop_item")) == current_rows(expected)


def loaded_with_history(spark, lake_config, tmp_path: Path) -> Path:
    root = tmp_path / "dms"
    DmsWriter(root).load(TABLE, COLUMNS, [(k, *v) for k, v in LOADED.items()], moment=T0)
    assert full_load(spark, lake_config, schema_of(TABLE), str(root)).ok
    return root
