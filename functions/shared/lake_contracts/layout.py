"""Where the pipeline's state lives in the artifacts bucket (docs/CONTRACTS.md, "S3 layout"), run ids and the
names of run reports."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from lake_contracts.names import encode_name
from lake_contracts.times import iso

# A CDC batch's run id, made by the drain (`new_run_id`): its creation time to the microsecond, then 8 hex digits.
RUN_ID_PATTERN = r"^\d{8}T\d{12}Z-[0-9a-f]{8}$"
RUN_ID = re.compile(RUN_ID_PATTERN)
# The reports of a full load (named after the execution) and of a table reload (`new_reload_run_id`).
# (Execution names hold no white space, slash or backslash.)
LOAD_REPORT_PATTERN = r"^(full-load-[^/\\\s]{1,80}|reload-\d{8}T\d{6}-[0-9a-f]{8})$"


def new_run_id(now: datetime) -> str:
    return f"{now:%Y%m%dT%H%M%S%fZ}-{uuid.uuid4().hex[:8]}"


def run_id_time(run_id: str) -> datetime | None:
    """When the drain created the batch `run_id` (`new_run_id`), or None for another name."""
    if not RUN_ID.match(run_id):
        return None
    try:
        return datetime.strptime(run_id[:22], "%Y%m%dT%H%M%S%fZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def new_reload_run_id(now: datetime) -> str:
    return f"reload-{now:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class ArtifactsLayout:
    """The keys below the manifest prefix (`manifests` as deployed)."""

    prefix: str = "manifests"

    @property
    def pending_prefix(self) -> str:
        return f"{self.prefix}/pending/"

    def pending_key(self, run_id: str) -> str:
        return f"{self.pending_prefix}{run_id}.json"

    @property
    def done_prefix(self) -> str:
        return f"{self.prefix}/done/"

    def done_key(self, run_id: str) -> str:
        return f"{self.done_prefix}{run_id}.json"

    def failed_key(self, name: str) -> str:
        """A batch moved aside (`name` is the pending manifest's file name; "" gives the folder)."""
        return f"{self.prefix}/failed/{name}"

    @property
    def reloads_prefix(self) -> str:
        return f"{self.prefix}/reloads/"

    def reload_key(self, table: str) -> str:
        """The reload request of `schema.table`, the name encoded (`encode_name`): any name DMS can write
        makes one key, and the key gives the name back."""
        return f"{self.reloads_prefix}{encode_name(table)}.json"

    def reload_aside_key(self, reload_key: str, now: datetime) -> str:
        """Where a corrupt reload request is kept (`reloads-failed/<its name>.<time>.json`)."""
        name = reload_key[len(self.reloads_prefix) :] if reload_key.startswith(self.reloads_prefix) else ""
        name = name or reload_key.rsplit("/", 1)[-1]
        return f"{self.prefix}/reloads-failed/{name.removesuffix('.json')}.{iso(now)}.json"

    @property
    def claim_key(self) -> str:
        """The drain that may write: the newest invocation (the drain's fence)."""
        return f"{self.prefix}/drain-claim.json"

    @property
    def full_load_marker_key(self) -> str:
        """Written by the state machine when its full-load job starts: `{"started_at": ISO-8601}`."""
        return f"{self.prefix}/full-load.json"

    def report_key(self, run_id: str) -> str:
        """The run report a job writes (a CDC batch's run id, a full load's or a reload's)."""
        return f"{self.prefix}/reports/{run_id}.json"

    @property
    def refined_report_key(self) -> str:
        """The report of the newest refine run that left no model failed (the refine job's
        `--refreshed_report_uri`): the watchdog measures the refined zone's lag from it."""
        return f"{self.prefix}/reports/refine-latest.json"
