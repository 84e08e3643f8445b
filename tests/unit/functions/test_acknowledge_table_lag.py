"""The acknowledge step publishes each clean table's lag (TableLagSeconds, dimension `table`) from the
`freshness` of the CDC run's report (lakehouse.audit.freshness; moto)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from tests.unit.functions.conftest import FakeContext, event
from tests.unit.functions.test_acknowledge_metrics import ack_app, put_report, report  # noqa: F401


def emitted_documents(capsys) -> list[dict]:
    """Every EMF document Powertools printed (one per single metric, one for the function's metrics)."""
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]


def table_lags(documents: list[dict]) -> dict[str, float]:
    """TableLagSeconds by table; each in the namespace and with the service of the function's other metrics."""
    (main,) = [d for d in documents if "ChangesApplied" in d]
    namespace = main["_aws"]["CloudWatchMetrics"][0]["Namespace"]
    lags = {}
    for document in documents:
        if "TableLagSeconds" not in document:
            continue
        (directive,) = document["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == namespace
        assert sorted(directive["Dimensions"][0]) == ["service", "table"]
        assert document["service"] == main["service"]
        (lags[document["table"]],) = document["TableLagSeconds"]
    return lags


def test_each_tables_lag_is_a_metric_of_its_own(ack_app, capsys):  # noqa: F811
    """Given a run report whose freshness says sales.item holds changes up to 2 minutes ago, sales.customer up
    to 10 minutes ago, and sales.empty (no rows) nothing,
    When the batch is acknowledged,
    Then TableLagSeconds is published once per table that has a time, with its `table` dimension."""
    now = datetime.now(UTC)
    document = report(None) | {
        "freshness": {
            "tables": [
                {
                    "source_table": "sales.item",
                    "newest_source_commit_ts": (now - timedelta(minutes=2)).isoformat(),
                },
                {
                    "source_table": "sales.customer",
                    "newest_source_commit_ts": (now - timedelta(minutes=10)).replace(tzinfo=None).isoformat(),
                },
                {"source_table": "sales.empty", "newest_source_commit_ts": None},
            ]
        }
    }
    put_report(document)

    ack_app.handler(event("acknowledge.json"), FakeContext())

    lags = table_lags(emitted_documents(capsys))
    assert sorted(lags) == ["sales.customer", "sales.item"]
    assert 119 <= lags["sales.item"] < 150
    assert 599 <= lags["sales.customer"] < 630


def test_a_report_without_freshness_publishes_no_table_lag(ack_app, capsys):  # noqa: F811
    put_report(
        report(None)
        | {"freshness": {"tables": [{"source_table": "sales.item", "newest_source_commit_ts": "x"}]}}
    )
    ack_app.handler(event("acknowledge.json"), FakeContext())
    assert table_lags(emitted_documents(capsys)) == {}


def test_each_table_whose_full_load_is_pending_is_a_metric_of_its_own(ack_app, capsys):  # noqa: F811
    """Given a run report naming crm.contact's full load pending for an hour (its rows committed, its facts
    never) and an entry of another shape,
    When the batch is acknowledged,
    Then FullLoadPendingSeconds is published for crm.contact alone, with its `table` dimension."""
    since = datetime.now(UTC) - timedelta(hours=1)
    put_report(
        report(None)
        | {
            "pending_loads": [
                {"table": "crm.contact", "pending_since": since.isoformat(), "pending_seconds": 3600},
                {"table": "crm.other", "pending_since": 7},
            ]
        }
    )

    ack_app.handler(event("acknowledge.json"), FakeContext())

    pending = {
        d["table"]: d["FullLoadPendingSeconds"][0]
        for d in emitted_documents(capsys)
        if "FullLoadPendingSeconds" in d
    }
    assert list(pending) == ["crm.contact"]
    assert 3599 <= pending["crm.contact"] < 3600 + 60
