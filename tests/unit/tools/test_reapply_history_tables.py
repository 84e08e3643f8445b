"""The reapply command (tools.reapply_quarantined) reads the schema file as the CDC job does: the tables
`--history_tables` names keep their history (it took the argument and dropped it). Pure: no Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lakehouse.apply.reapply import ReapplyReport
from lakehouse.base.schema import SchemaFile
from lakehouse.jobs import reapply

import tools.reapply_quarantined as command


def test_the_command_marks_the_tables_history_tables_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Given a schema file with shop.item and shop.stock, neither marked "history"
    When the command runs with --history_tables shop.item (the stack's HistoryTables)
    Then the schema it re-applies with keeps shop.item's history, and only its."""
    schema_file = tmp_path / "schema.json"
    columns = [{"name": "id", "type": "int"}]
    tables = {name: {"primary_key": ["id"], "columns": columns} for name in ("shop.item", "shop.stock")}
    schema_file.write_text(json.dumps({"dialect": "mysql", "tables": tables}), encoding="utf-8")
    seen: list[SchemaFile] = []

    def reapplied(spark, config, schema, files, run_id, options, dry_run):
        seen.append(schema)
        return ReapplyReport(files=list(files))

    monkeypatch.setattr(reapply, "build_session", lambda config, name: object())
    monkeypatch.setattr(reapply, "move_records", lambda spark, config: None)  # no lake here to move
    monkeypatch.setattr(reapply, "reapply_quarantined", reapplied)
    argv = ["--schema_file", str(schema_file), "--warehouse", str(tmp_path / "warehouse")]

    code = command.main([*argv, "--file", "s3://raw/dms/shop/item/x.csv", "--history_tables", "shop.item"])

    assert code == 0
    [schema] = seen
    assert {name: spec.history for name, spec in schema.tables.items()} == {
        "shop.item": True,
        "shop.stock": False,
    }
