"""The local pipeline deploys the stack for its source: a MySQL source's stack gets `SourceEngine=mysql`, so the
deployed reconcile job reads it with MySQL's SQL and a `jdbc:mysql` URL built from its secret;
the other sources keep the template's default, `postgresql`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from localaws import pipeline_run, sam_app
from localaws.pipeline_run import LocalPipeline, RunSettings


class Deployed(Exception):
    """Raised by the fake `sam deploy`: the test needs only the parameters it was given."""

    def __init__(self, parameters: dict[str, str]) -> None:
        super().__init__("deployed")
        self.parameters = parameters


@pytest.mark.parametrize(
    ("source", "engine"), [("mysql", "mysql"), ("postgresql", "postgresql"), ("sqlite", "postgresql")]
)
def test_the_stack_is_deployed_with_the_source_engine_of_its_source(
    source: str, engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Given a local pipeline over a MySQL, PostgreSQL or SQLite source,
    When it deploys the real template (its declared parameters; `sam deploy` faked),
    Then SourceEngine is mysql for MySQL and postgresql otherwise, and the run's own parameters still win."""

    def deploy(endpoint_url: str, stack_name: str, parameters: dict[str, str], **_: Any) -> None:
        raise Deployed(dict(parameters))

    monkeypatch.setattr(sam_app, "deploy", deploy)
    settings = RunSettings(name="t", workdir=tmp_path, source=source, parameters={"ConsistentPoints": "true"})
    pipeline = LocalPipeline("http://127.0.0.1:1", settings)

    with pytest.raises(Deployed) as deployed:
        pipeline.deploy(build=False)

    assert "SourceEngine" in sam_app.template_parameters()
    assert deployed.value.parameters["SourceEngine"] == engine
    assert deployed.value.parameters["ConsistentPoints"] == "true"
    assert pipeline_run.SOURCE_KINDS == ("postgresql", "mysql", "sqlite")  # every kind is parametrized here
