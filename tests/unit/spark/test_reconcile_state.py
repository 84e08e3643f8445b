"""The reconcile's state file (the rotation, the sightings, the reloads asked of DMS) is written like every other
write of a run: only while the execution that started the run still holds the pipeline lease."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from lakehouse.io import fence
from lakehouse.io.fence import LeaseFence, LeaseLostError
from lakehouse.jobs.reconcile import reload_requests_from, write_state

HOLDER, TAKER = "arn:states:execution:loop-1", "arn:states:execution:loop-2"


@pytest.fixture(autouse=True)
def unfenced_after():
    yield
    fence.install(None)


def hold(path: Path, holder: str, epoch: int) -> None:
    path.write_text(json.dumps({"holder": holder, "epoch": epoch, "acquired_at": "2026-11-28T09:00:00Z"}))


def test_a_run_that_lost_the_lease_leaves_the_state_file_as_the_holder_wrote_it(tmp_path: Path) -> None:
    """Given a reconcile run started under loop-1's lease (epoch 4) that wrote its state,
    When loop-2 takes the lease over (epoch 5) and the old run writes its state again,
    Then LeaseLostError, and the state file is still the first one (the holder's runs read it)."""
    lease, state = tmp_path / "lease.json", tmp_path / "reconcile-rotation.json"
    hold(lease, HOLDER, 4)
    fence.install(LeaseFence(str(lease), HOLDER, 4))
    first = {"last_table": "s.a", "sightings": {}, "reload_requests": {"s.a": "2026-11-28T10:00:00"}}
    write_state(str(state), first, None)
    hold(lease, TAKER, 5)

    with pytest.raises(LeaseLostError):
        write_state(str(state), {"last_table": "s.b", "sightings": {}, "reload_requests": {}}, None)

    assert json.loads(state.read_text()) == first


def test_the_reloads_asked_cross_runs_and_an_unreadable_one_is_dropped() -> None:
    """Given the state's reload requests with one unreadable time, When read back, Then the readable one
    is the request's moment and the other is dropped (its table may be asked again, never lost)."""
    assert reload_requests_from({"s.a": "2026-11-28T10:00:00", "s.b": "yesterday"}) == {
        "s.a": datetime(2026, 11, 28, 10, 0, 0)
    }
    assert reload_requests_from(None) == {} and reload_requests_from(["s.a"]) == {}
