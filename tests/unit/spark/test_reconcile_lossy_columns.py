"""A column DMS carries lossily (a MySQL FLOAT: AWS DMS writes it in fewer digits than the single holds) is
left out of the reconcile's comparison and named in the report, unless the DMS in use carries it exactly:
otherwise every run would find it diverged and RepairMode=reload would reload the table forever."""

from __future__ import annotations

import sqlite3

from lakehouse.apply.full_load import full_load
from lakehouse.base.schema import SchemaFile
from lakehouse.reconcile.plan import ReconcileOptions
from lakehouse.reconcile.run import reconcile
from lakehouse.reconcile.sources import SqliteReconcileSource

from tests.support import DmsWriter
from tests.unit.spark.test_reconcile import FMT, OPTIONS, SMALL


def test_a_mysql_float_written_in_fewer_digits_is_not_divergence_and_the_report_says_it_was_not_compared(
    spark, lake_config, tmp_path
):
    """Given a MySQL table (id, FLOAT f, VARCHAR v) whose source holds f = 1.2345678 and 3.1415927 while DMS
    wrote 1.23457 and 3.14159 (6 digits), and row 2's v changed on the source alone,
    When reconciled, Then only row 2 differs and the report names f as not compared;
    When the run is told the DMS carries FLOAT exactly, Then f is compared and both rows differ."""
    db_path = tmp_path / "source.db"
    with sqlite3.connect(db_path) as db:
        db.execute("CREATE TABLE lossy (id INTEGER PRIMARY KEY, f REAL, v TEXT)")
        db.executemany("INSERT INTO lossy VALUES (?, ?, ?)", [(1, 1.2345678, "a"), (2, 3.1415927, "b2")])
    schema = SchemaFile.from_dict(
        {
            "dialect": "mysql",
            "tables": {
                "main.lossy": {
                    "primary_key": ["id"],
                    "columns": [
                        {"name": "id", "type": "int"},
                        {"name": "f", "type": "float"},
                        {"name": "v", "type": "varchar(10)"},
                    ],
                }
            },
        }
    )
    raw = tmp_path / "raw"
    DmsWriter(raw, FMT).load("main.lossy", ["id", "f", "v"], [(1, "1.23457", "a"), (2, "3.14159", "b")])
    assert full_load(spark, lake_config, schema, str(raw), options=OPTIONS).ok
    source = SqliteReconcileSource(spark, str(db_path))

    report = reconcile(spark, lake_config, schema, source, SMALL, run_id="f1")
    exact = ReconcileOptions(**{**SMALL.__dict__, "compare_mysql_float": True})
    compared = reconcile(spark, lake_config, schema, source, exact, run_id="f2")

    assert [(t.differing, t.samples, t.not_compared) for t in report.tables] == [
        (1, {"differing": [{"id": 2}]}, ["f"])
    ]
    assert [(t.differing, t.samples, t.not_compared) for t in compared.tables] == [
        (2, {"differing": [{"id": 1}, {"id": 2}]}, [])
    ]
