"""The DMS S3 file contract, pure Python: how DMS names its files and folders, and the columns every file
starts with. The one definition that the drain Lambda (which files to batch), the Spark jobs (how to read and
order them) and the local DMS (how to write them) import.

Full load: `<prefix>/<schema>/<table>/LOAD00000001.csv` with a HEX counter (…09, …0A).
CDC: `<prefix>/<schema>/<table>/[<date folders>/]<YYYYMMDD-HHMMSS…>.csv`, ordered by their time.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

OP_COLUMN = "Op"
VALID_OPS = ("I", "U", "D")  # Op: insert, update, delete
CHANGE_SEQ_COLUMN = "AR_H_CHANGE_SEQ"
DEFAULT_TIMESTAMP_COLUMN = "dms_timestamp"
CHANGE_SEQ_DIGITS = 35

# What DMS writes: CSV (DataFormat=csv, optionally gzipped) or Parquet (DataFormat=parquet).
EXTENSION = r"\.(?P<ext>csv(?:\.gz)?|parquet)"
# LOAD00000001.csv (hex counter), or LOAD_<segment>_<counter>.csv when a table is loaded in parallel segments.
LOAD_FILE = re.compile(r"^LOAD(?:_(?P<segment>\d+)_)?(?P<counter>[0-9A-Fa-f]{8})" + EXTENSION + "$")
# CDC files are named by the time DMS wrote them: 20141029-1134010000.csv (the AWS documentation's example),
# 20261122-101010123.csv; the fraction of a second has no fixed number of digits.
CDC_FILE = re.compile(r"^(?P<date>\d{8})-(?P<time>\d{6})(?P<fraction>\d*)" + EXTENSION + "$")
# DatePartitionEnabled puts CDC files below date folders: 2026/11/22[/10], 2026-11-22, 20261122, ...
DATE_FOLDER = re.compile(r"^\d{2,10}(?:[_-]\d{2,4}){0,3}$")
MAX_DATE_FOLDERS = 4
# A synthesized change sequence: the file's time as DMS's AR_H_CHANGE_SEQ spells a time (YYYYMMDDHHmmSShh,
# 16 digits), then 19 digits: the rest of the file time's fraction (7) and the record's position (12).
RECORD_DIGITS = 12


class NotADmsFileError(ValueError):
    """A key that does not follow the DMS layout (`<schema>/<table>/[<date folders>/]<file>.csv|parquet`)."""


@dataclass(frozen=True, order=True)
class DmsFile:
    """One DMS output object, located and classified from its key alone."""

    source_schema: str
    table: str
    is_full_load: bool
    order_key: str
    uri: str
    size: int = 0

    @property
    def name(self) -> str:
        return self.uri.rsplit("/", 1)[-1]

    @property
    def is_parquet(self) -> bool:
        return self.uri.endswith(".parquet")

    @property
    def qualified_table(self) -> str:
        return f"{self.source_schema}.{self.table}"

    @property
    def sequence_base(self) -> int | None:
        """The change sequence of this CDC file's first record when DMS wrote none (AR_H_CHANGE_SEQ not
        configured): shaped like DMS's own (the file's time, then a counter), so that records order by
        file time, then position, and compare sensibly with real sequences. None for LOAD files."""
        if self.is_full_load:
            return None
        digits = self.order_key  # YYYYMMDDHHMMSS + a 12-digit fraction
        return int(digits[:16]) * 10**19 + int(digits[16:23]) * 10**RECORD_DIGITS

    @property
    def written_at(self) -> datetime | None:
        """When DMS wrote this CDC file (UTC, from its name); None for LOAD files."""
        if self.is_full_load:
            return None
        return datetime.strptime(self.order_key[:20], "%Y%m%d%H%M%S%f")


def trailing_date_folders(folders: Sequence[str]) -> int:
    """How many of the last folders may be DatePartitionEnabled's date folders (at most MAX_DATE_FOLDERS, and
    never the `<schema>/<table>` two above them)."""
    dated = 0
    while dated < MAX_DATE_FOLDERS and len(folders) - dated > 2 and DATE_FOLDER.match(folders[-1 - dated]):
        dated += 1
    return dated


KnownTable = Callable[[str, str], bool]  # (schema, table) -> whether the schema file has `schema.table`


def known_tables(qualified_names: Iterable[str]) -> KnownTable:
    """The `known` rule of `parse_dms_key` for the tables a schema file names (`schema.table`, any case: the
    schema file's own lookup ignores case)."""
    names = {name.lower() for name in qualified_names}
    return lambda schema, table: f"{schema}.{table}".lower() in names


def parse_dms_key(uri: str, size: int = 0, known: KnownTable | None = None) -> DmsFile:
    """Classify `…/<schema>/<table>/[<date folders>/]<LOADxxxxxxxx|YYYYMMDD-HHMMSS…>.<csv[.gz]|parquet>`.

    A table may be named like a date folder (`sales/2024_01/`): the key alone can't tell. With `known`
    (whether the schema file has `schema.table`), the reading with the most date folders whose table is
    known wins; without it, or when none is known, every folder shaped like a date is a date folder. Every
    reader of a key passes the same rule (`known_tables` of the schema file), so a key names one table
    everywhere: in the CDC run, its ledger, the raw audit, the reconcile and the consistent points."""
    parts = uri.rstrip("/").split("/")
    name, folders = parts[-1], parts[:-1]
    load = LOAD_FILE.match(name)
    cdc = None if load else CDC_FILE.match(name)
    if not load and not cdc:
        raise NotADmsFileError(
            f"{uri}: {name!r} is neither a LOAD file nor a timestamp-named CDC file (.csv, .csv.gz, .parquet)"
        )
    dated = trailing_date_folders(folders)
    readings = [folders[: len(folders) - n] for n in range(dated, -1, -1)]  # most date folders first
    chosen = readings[0]
    if known is not None:
        chosen = next((r for r in readings if len(r) >= 2 and known(r[-2], r[-1])), chosen)
    if len(chosen) < 2 or not chosen[-1] or not chosen[-2]:
        raise NotADmsFileError(f"{uri}: expected …/<schema>/<table>/<file>.csv")
    source_schema, table = chosen[-2], chosen[-1]
    if load:
        segment = int(load.group("segment") or 0)
        order = f"{segment:06d}{int(load.group('counter'), 16):010d}"
        return DmsFile(source_schema, table, True, order, uri, size)
    assert cdc is not None  # a name that is neither a LOAD nor a CDC file was refused above
    fraction = cdc.group("fraction")[:12].ljust(12, "0")
    return DmsFile(
        source_schema, table, False, f"{cdc.group('date')}{cdc.group('time')}{fraction}", uri, size
    )


def load_file_name(counter: int, extension: str = "csv") -> str:
    """`LOAD00000001.csv` (or `.parquet`): DMS counts full-load files in upper-case hex (…09, …0A)."""
    return f"LOAD{counter:08X}.{extension}"


def cdc_file_name(moment: datetime, extension: str = "csv") -> str:
    """`YYYYMMDD-HHMMSSmmm.csv` (or `.parquet`), the commit-time name of a CDC file."""
    return moment.strftime("%Y%m%d-%H%M%S") + f"{moment.microsecond // 1000:03d}.{extension}"


def change_seq(number: int) -> str:
    """An `AR_H_CHANGE_SEQ` value: 35 digits, zero-padded, increasing."""
    return f"{number:0{CHANGE_SEQ_DIGITS}d}"


def object_key(bucket_folder: str, schema: str, table: str, file_name: str) -> str:
    """Where DMS puts a file: `<BucketFolder>/<schema>/<table>/<file>` (no empty part)."""
    prefix = bucket_folder.strip("/")
    return "/".join(part for part in (prefix, schema, table, file_name) if part)
