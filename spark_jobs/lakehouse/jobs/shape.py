"""One shape for every job: a `parser()` that declares its arguments (besides the lake's own, which
`parse_job_arguments` adds: catalog, warehouse, databases, lease) and a `run(config, args, parser)`;
`job_main(parser, run)` makes the `main(argv) -> exit code` a Glue script (`spark_jobs/*_job.py`), EMR
Serverless and a local run call. Arguments arrive as Glue passes them: `--name value`."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import Any

from lakehouse.base.config import LakeConfig, parse_job_arguments
from lakehouse.base.logs import configure_logging
from lakehouse.io.storage import write_text

Parser = Callable[[], argparse.ArgumentParser]
Run = Callable[[LakeConfig, argparse.Namespace, argparse.ArgumentParser], int]


def job_main(parser: Parser, run: Run) -> Callable[[Sequence[str]], int]:
    """The job's entry: logging set up, its arguments parsed (a wrong one is an error naming it, before
    Spark starts), then its run, whose exit code it returns."""

    def main(argv: Sequence[str]) -> int:
        configure_logging()
        declared = parser()
        config, args = parse_job_arguments(argv, declared)
        return run(config, args, declared)

    return main


def require_schema_file(parser: argparse.ArgumentParser, config: LakeConfig) -> None:
    if not config.schema_file:
        parser.error("--schema_file is required: generate it with python -m tools.schema_gen")


def publish_report(document: dict[str, Any], report_uri: str | None, config: LakeConfig) -> None:
    """A run's report as JSON: printed (the driver's log keeps it) and written to `--report_uri` if given."""
    text = json.dumps(document, indent=2, default=str)
    print(text)
    if report_uri:
        write_text(report_uri, text, config.s3_endpoint_url)
