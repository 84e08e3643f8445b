"""How old a CDC file may be and still be re-sent (by the raw audit, or in a requeued batch): the one age rule.

A delete leaves a tombstone that keeps an older change of its key from bringing the row back; the
maintenance job drops a tombstone `TombstoneRetentionDays` after it was recorded. Changes of a table are
written into its files in commit order, so a delete that came after a change sits in the same file or a
later one, and was recorded no earlier than that file's name time. A file named after the horizon (now less
the retention) therefore finds every tombstone of a later delete still kept; a file named at it or before
may not, and re-sent it could bring deleted rows back. Its age is its own time, from its name (when DMS wrote
it), never when it was listed, drained or moved aside.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from lake_contracts.dms_files import NotADmsFileError, parse_dms_key

# The template's lowest TombstoneRetentionDays: the safe default where the deployed value is not known.
MIN_TOMBSTONE_RETENTION_DAYS = 29


def resend_horizon(now: datetime, retention_days: float) -> datetime:
    """The re-send horizon at `now` (UTC, naive): a CDC file must be named after it to be re-sent."""
    moment = now.astimezone(UTC).replace(tzinfo=None) if now.tzinfo else now
    return moment - timedelta(days=retention_days)


def beyond_retention(written_at: datetime, now: datetime, retention_days: float) -> bool:
    """A CDC file named at `written_at` (UTC) is too old to re-send at `now` (named at or before the
    horizon): its later deletes' tombstones may be gone."""
    named = written_at.astimezone(UTC).replace(tzinfo=None) if written_at.tzinfo else written_at
    return named <= resend_horizon(now, retention_days)


def oldest_cdc_file(uris: Iterable[str]) -> tuple[str, datetime] | None:
    """The CDC file with the oldest name time among `uris` (URI, time), None when none is a CDC file (LOAD
    files and other names have no time of their own)."""
    oldest: tuple[str, datetime] | None = None
    for uri in uris:
        try:
            written = parse_dms_key(uri).written_at
        except NotADmsFileError:
            continue
        if written is not None and (oldest is None or written < oldest[1]):
            oldest = (uri, written)
    return oldest
