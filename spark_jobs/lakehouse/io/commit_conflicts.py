"""A statement that loses to a concurrent commit, planned again.

Iceberg retries by itself only the race for the table's metadata pointer. A conflict its validation finds is
final: a compaction committed between a MERGE's plan and its commit removed data files the MERGE's position
deletes name, and the MERGE fails with `org.apache.iceberg.exceptions.ValidationException` (possibly wrapped).
Nothing of the failed attempt was committed (validation runs before the pointer moves), so the statement is
planned again from the same input against the table as it now is, and commits once. The attempts are bounded
and logged."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

VALIDATION_EXCEPTION = "org.apache.iceberg.exceptions.ValidationException"
MAX_REPLANS = 3  # a compaction commits a group at a time: more than a few losses in a row is not a race
_CAUSE_DEPTH = 20


def replanned_on_conflict(
    spark: SparkSession, table: str, statement: Callable[[], Any], replans: int = MAX_REPLANS
) -> int:
    """Run `statement` (it plans against `table` and commits); when its commit loses to a concurrent one,
    forget the table's cached metadata and run it again, at most `replans` more times. Returns how many times
    it was planned again."""
    for attempt in range(replans + 1):
        try:
            statement()
            return attempt
        except Exception as error:
            if attempt == replans or not is_commit_conflict(error):
                raise
            log.warning(
                "%s: the commit lost to a concurrent commit (%s); planning it again (%d of %d)",
                table,
                _first_line(error),
                attempt + 1,
                replans,
            )
            spark.catalog.refreshTable(table)
    raise AssertionError("unreachable")  # pragma: no cover


def is_commit_conflict(error: BaseException) -> bool:
    """Whether `error` is, or was caused by, Iceberg's ValidationException (as py4j or PySpark raise it)."""
    throwable = getattr(error, "java_exception", None) or getattr(error, "_origin", None)
    for _ in range(_CAUSE_DEPTH):
        if throwable is None:
            break
        if throwable.getClass().getName() == VALIDATION_EXCEPTION:
            return True
        throwable = throwable.getCause()
    cause = error.__cause__ or error.__context__ or getattr(error, "cause", None)
    if isinstance(cause, BaseException) and cause is not error:
        return is_commit_conflict(cause)
    return throwable is None and VALIDATION_EXCEPTION in str(error)


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
