"""The history guard: the event count in one call, and when to roll over."""

from __future__ import annotations

import pytest

from tests.unit.functions.conftest import FakeContext, event


class FakeStepFunctions:
    def __init__(self, newest_event_id: int) -> None:
        self.newest_event_id = newest_event_id
        self.calls: list[dict] = []

    def get_execution_history(self, **request: object) -> dict:
        self.calls.append(request)
        return {"events": [{"id": self.newest_event_id, "type": "TaskStateExited"}]}


@pytest.mark.parametrize(("events", "rollover"), [(19_999, False), (20_000, True), (24_500, True)])
def test_rolls_over_at_the_threshold_reading_only_the_newest_event(aws, load_handler, events, rollover):
    """Given an execution with N events, When the guard runs with threshold 20,000,
    Then it asks for one event, newest first, and says whether to roll over."""
    app = load_handler("history_guard", HISTORY_THRESHOLD="20000")
    fake = FakeStepFunctions(events)
    app.sfn = fake

    result = app.handler(event("history_guard.json"), FakeContext())

    assert result == {"event_count": events, "threshold": 20_000, "rollover": rollover}
    assert fake.calls == [
        {"executionArn": event("history_guard.json")["execution_arn"], "reverseOrder": True, "maxResults": 1}
    ]


def test_a_threshold_at_or_above_the_service_limit_is_refused(aws, load_handler):
    load_handler("history_guard")
    import guard

    with pytest.raises(ValueError, match="threshold"):
        guard.should_roll_over(10, 25_000)
