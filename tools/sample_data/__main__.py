"""`python -m tools.sample_data`: create the demo source database, or run a change workload on it, and
optionally write its schema file."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import tools.sample_data
from tools.sample_data.workload import run_workload
from tools.sample_data.writer import create_source_database, schema_document


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.sample_data",
        description=tools.sample_data.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--db", required=True, help="the source database: an SQLite file, or a postgresql:// connection URI"
    )
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--workload", type=int, default=0, help="run this many operations on an existing db")
    parser.add_argument("--schema_out", help="also write the schema file here")
    args = parser.parse_args(argv)
    if args.workload:
        print(json.dumps(run_workload(args.db, args.workload, args.seed).summary(), indent=2))
    else:
        print(json.dumps(create_source_database(args.db, args.scale, args.seed), indent=2))
    if args.schema_out:
        Path(args.schema_out).write_text(
            json.dumps(schema_document(args.db), indent=2) + "\n", encoding="utf-8"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
