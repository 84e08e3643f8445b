"""PyIceberg comparator: apply the same DMS CDC files with PyIceberg `delete` + `upsert` in one
transaction, on its own shallow copy of the table (SqlCatalog on sqlite, new files in its own folder).

    python bench/pyiceberg_apply.py --metadata <base vN.metadata.json> --workdir <dir> FILE…

Prints JSON: {"seconds": …, "changes": …, "rows_after": …}. Run as a subprocess so that its memory
and time are its own.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import In
from pyiceberg.table import Table

KEY = "order_id"


def register_copy(metadata: Path, workdir: Path) -> Table:
    """Register a copy of `metadata` whose location is under `workdir`: the base data files are
    shared read-only; everything PyIceberg writes goes to `workdir`."""
    workdir = workdir.resolve()
    if workdir.exists():
        shutil.rmtree(workdir)
    location = workdir / "table"
    (location / "metadata").mkdir(parents=True)
    document = json.loads(metadata.read_text())
    document["location"] = location.as_uri()
    copy = location / "metadata" / "00000-base.metadata.json"
    copy.write_text(json.dumps(document))
    catalog = SqlCatalog(
        "bench", uri=f"sqlite:///{workdir / 'catalog.db'}", warehouse=(workdir / "warehouse").as_uri()
    )
    catalog.create_namespace("bench")
    return catalog.register_table(("bench", "orders"), str(copy))


def read_changes(files: list[Path], target: pa.Schema) -> pa.Table:
    """All files as one Arrow table of typed changes, in file then record order."""
    text_types = {name: pa.string() for name in target.names} | {
        "Op": pa.string(),
        "dms_timestamp": pa.string(),
        "AR_H_CHANGE_SEQ": pa.string(),
    }
    convert = pacsv.ConvertOptions(column_types=text_types, strings_can_be_null=True)
    parse = pacsv.ParseOptions(newlines_in_values=True)
    raw = pa.concat_tables([pacsv.read_csv(f, parse_options=parse, convert_options=convert) for f in files])
    columns: dict[str, pa.Array] = {"_op": raw["Op"]}
    for field in target:
        if field.name == "dms_commit_ts":
            source = raw["dms_timestamp"]
        elif field.name == "dms_change_seq":
            source = raw["AR_H_CHANGE_SEQ"]
        else:
            source = raw[field.name]
        if pa.types.is_timestamp(field.type) and pa.types.is_string(source.type):
            source = source.cast(pa.timestamp("us"))  # ISO 8601 with a space and microseconds
        columns[field.name] = source.cast(field.type)
    return pa.table(columns)


def last_per_key(changes: pa.Table) -> pa.Table:
    """The last change of each key (by change sequence; files and records are in change order)."""
    ordered = changes.sort_by([("dms_change_seq", "ascending")])
    ordered = ordered.append_column("_index", pa.array(range(ordered.num_rows), pa.int64()))
    last = ordered.group_by(KEY).aggregate([("_index", "max")])
    return ordered.take(last["_index_max"]).drop_columns(["_index"])


def apply(table: Table, files: list[Path]) -> dict[str, int]:
    target = table.schema().as_arrow()
    latest = last_per_key(read_changes(files, target))
    deletes = latest.filter(pc.equal(latest["_op"], "D"))
    upserts = latest.filter(pc.not_equal(latest["_op"], "D")).drop_columns(["_op"]).select(target.names)
    upserts = upserts.cast(target)
    with table.transaction() as transaction:
        if deletes.num_rows:
            # pyiceberg's predicates take (term, values) positionally; mypy sees only their pydantic fields
            transaction.delete(In(KEY, deletes[KEY].to_pylist()))  # type: ignore[call-arg, arg-type]
        if upserts.num_rows:
            transaction.upsert(upserts, join_cols=[KEY])
    return {"deletes": deletes.num_rows, "upserts": upserts.num_rows}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metadata", type=Path, required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("files", type=Path, nargs="+")
    args = parser.parse_args(argv)
    table = register_copy(args.metadata, args.workdir)
    started = time.perf_counter()
    counts = apply(table, args.files)
    seconds = time.perf_counter() - started
    rows_after = table.refresh().scan(selected_fields=(KEY,)).to_arrow().num_rows
    print(json.dumps({"seconds": seconds, "rows_after": rows_after, **counts}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
