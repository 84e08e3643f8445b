"""Put batches the drain moved aside back in line: now `lakectl requeue` (lakectl.batches holds the rules).
Kept for the commands already written down:

    python -m tools.requeue_batch --stack-name dms-iceberg-lake             # list pending and failed batches
    python -m tools.requeue_batch --stack-name dms-iceberg-lake --run-id 20261124T101500000000Z-1a2b3c4d
    python -m tools.requeue_batch --stack-name dms-iceberg-lake --all
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from lakectl.batches import (
    FAILED,
    PENDING,
    FailedBatch,
    TooOldToRequeueError,
    batch_age_from,
    drained_at,
    failed_batches,
    pending_batches,
    requeue,
)
from lakectl.cli import main as lakectl

__all__ = [
    "FAILED",
    "PENDING",
    "FailedBatch",
    "TooOldToRequeueError",
    "batch_age_from",
    "drained_at",
    "failed_batches",
    "pending_batches",
    "requeue",
]


def main(argv: Sequence[str] | None = None) -> int:
    return lakectl(["requeue", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
