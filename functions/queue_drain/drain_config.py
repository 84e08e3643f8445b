"""What a drain is given: where it reads and writes (`Locations`: the queues, the buckets, and its keys in the
artifacts bucket) and how much it may take in one run (`DrainLimits`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from lake_contracts.layout import ArtifactsLayout
from lake_contracts.reload_requests import ReloadRequestStore

StuckBatchPolicy = Literal["continue", "stop"]


@dataclass(frozen=True)
class DrainLimits:
    max_files: int = 500
    max_bytes: int = 2 * 1024**3
    time_budget_seconds: float = 60.0
    wait_seconds: int = 1
    # How long a received page stays invisible: must outlast the rest of the Lambda's run.
    visibility_timeout_seconds: int = 330
    # The queue's redrive maxReceiveCount: every receive counts, so a message is given back only while
    # it keeps a margin below it (else it is taken, and the byte bound is exceeded by that page).
    max_receive_count: int = 5
    # How often a pending manifest is handed out to a CDC run before it is moved aside.
    max_manifest_attempts: int = 3
    on_stuck_batch: StuckBatchPolicy = "continue"


@dataclass(frozen=True)
class Locations:
    """The drain's queues and buckets; its keys in the artifacts bucket are the shared layout's."""

    queue_url: str
    dead_letter_queue_url: str
    artifacts_bucket: str
    manifest_prefix: str = "manifests"
    raw_bucket: str = ""  # empty: any bucket (tests of the manifest logic only)
    raw_prefix: str = "dms"

    @property
    def layout(self) -> ArtifactsLayout:
        return ArtifactsLayout(self.manifest_prefix)

    def pending_key(self, run_id: str) -> str:
        return self.layout.pending_key(run_id)

    @property
    def pending_prefix(self) -> str:
        return self.layout.pending_prefix

    def failed_key(self, name: str) -> str:
        return self.layout.failed_key(name)

    @property
    def reload_requests(self) -> ReloadRequestStore:
        """The reload requests the drain records LOAD files into (the reloads function's store too)."""
        return ReloadRequestStore(self.artifacts_bucket, self.manifest_prefix)

    @property
    def claim_key(self) -> str:
        """The drain that may write: the newest invocation (`DrainFence`)."""
        return self.layout.claim_key

    @property
    def full_load_marker_key(self) -> str:
        return self.layout.full_load_marker_key
