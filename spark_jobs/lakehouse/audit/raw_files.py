"""The raw zone's CDC files, each read from its key by the DMS file contract, and the status the raw audit
gives each (lakehouse.audit.raw_zone): applied, quarantined, superseded, pending, moved aside, young or lost."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from lake_contracts.dms_files import KnownTable, NotADmsFileError, parse_dms_key
from lake_contracts.resend_horizon import beyond_retention

from lakehouse.io.storage import list_objects

Status = Literal[
    "applied", "quarantined", "superseded", "pending", "moved_aside", "young", "lost", "beyond_retention"
]
STATUSES: tuple[Status, ...] = (
    "applied",
    "quarantined",
    "superseded",
    "pending",
    "moved_aside",
    "young",
    "lost",
    "beyond_retention",
)


@dataclass(frozen=True)
class RawFile:
    """A CDC file of the raw zone, as its key and its listing tell it."""

    uri: str
    table: str  # `<schema>.<table>` as DMS spells its folders
    name: str
    written_at: datetime  # UTC, naive: the time in its name (DMS's clock)
    size: int = 0
    landed_at: datetime | None = None  # UTC, naive: S3's LastModified

    @property
    def table_key(self) -> str:
        return self.table.lower()

    @property
    def age_from(self) -> datetime:
        """When the file can last have been announced: the later of its name's time and its landing."""
        return max(self.written_at, self.landed_at) if self.landed_at else self.written_at


def raw_cdc_files(
    objects: Iterable[tuple[str, int, datetime | None]], known: KnownTable | None = None
) -> list[RawFile]:
    """The CDC files among listed objects (uri, size, last modified), each of the table `known` (the schema
    file's tables: `dms_files.known_tables`) reads it as, as the CDC run does: LOAD files and keys that are
    not DMS files are left out."""
    found = []
    for uri, size, modified in objects:
        try:
            file = parse_dms_key(uri, size, known)
        except NotADmsFileError:
            continue
        if file.is_full_load or file.written_at is None:
            continue
        found.append(RawFile(uri, file.qualified_table, file.name, file.written_at, size, modified))
    return sorted(found, key=lambda f: (f.written_at, f.uri))


def classify(
    raw_files: Sequence[RawFile],
    applied: Collection[tuple[str, str]],
    pending: Collection[str],
    moved_aside: Collection[str],
    quarantined: Collection[str],
    loaded_at: Mapping[str, datetime],
    now: datetime,
    grace: timedelta,
    retention_days: float | None = None,
) -> list[tuple[RawFile, Status]]:
    """Each file with its status (lakehouse.audit.raw_zone's docstring), the first that holds in that order.

    `applied`: (lower-case `<schema>.<table>`, file name) of the ledger; `pending`, `moved_aside`,
    `quarantined`: file URIs; `loaded_at`: lower-case table -> when DMS had written its last (re)load;
    `now`: UTC (naive or aware). With `retention_days` (TombstoneRetentionDays), a file nothing knows that
    is named at or before the re-send horizon (lake_contracts.resend_horizon) is `beyond_retention`, not `lost`:
    re-sent, it could bring rows deleted since back."""
    moment = now.astimezone(UTC).replace(tzinfo=None) if now.tzinfo else now
    ledger = {(table.lower(), name) for table, name in applied}
    sorted_out: list[tuple[RawFile, Status]] = []
    for file in raw_files:
        status: Status
        reloaded = loaded_at.get(file.table_key)
        if (file.table_key, file.name) in ledger:
            status = "applied"
        elif file.uri in quarantined:
            status = "quarantined"
        elif reloaded is not None and file.written_at <= reloaded:
            status = "superseded"
        elif file.uri in pending:
            status = "pending"
        elif file.uri in moved_aside:
            status = "moved_aside"
        elif moment - file.age_from < grace:
            status = "young"
        elif retention_days is not None and beyond_retention(file.written_at, moment, retention_days):
            status = "beyond_retention"
        else:
            status = "lost"
        sorted_out.append((file, status))
    return sorted_out


def unapplied_files(
    raw_files: Sequence[RawFile],
    applied: Collection[tuple[str, str]],
    pending: Collection[str],
    now: datetime,
    grace: timedelta,
    *,
    moved_aside: Collection[str] = (),
    quarantined: Collection[str] = (),
    loaded_at: Mapping[str, datetime] | None = None,
) -> list[RawFile]:
    """The CDC files older than `grace` that nothing will apply: in no ledger, pending or moved-aside
    manifest, not quarantined, not superseded by a reload."""
    verdicts = classify(raw_files, applied, pending, moved_aside, quarantined, loaded_at or {}, now, grace)
    return [file for file, status in verdicts if status == "lost"]


def list_raw_files(
    raw_path: str, endpoint_url: str | None = None, known: KnownTable | None = None
) -> list[RawFile]:
    return raw_cdc_files(
        ((o.uri, o.size, o.last_modified) for o in list_objects(raw_path, endpoint_url)), known
    )
