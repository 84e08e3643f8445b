"""The one time format of the pipeline's documents: ISO-8601, UTC, microseconds, `Z`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def aware(moment: datetime) -> datetime:
    """`moment` with a time zone: a naive time is UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def iso(moment: datetime) -> str:
    """`2026-11-22T10:10:10.123456Z`: how manifests, reload requests and claims write a time."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: Any) -> datetime | None:
    """An ISO-8601 text (`Z` or an offset; naive is UTC) or a datetime as an aware datetime; None for None or
    an empty text; ValueError for any other text."""
    if isinstance(value, datetime):
        return aware(value)
    if not isinstance(value, str) or not value:
        return None
    return aware(datetime.fromisoformat(value.replace("Z", "+00:00")))
