"""Step Functions' optimized `emr-serverless` integration (`startJobRun`, `startJobRun.sync`) for LocalStack.

Community LocalStack 2026.3 lists `emr-serverless` among the optimized integrations it does not support
(`state_task_service_factory._UNSUPPORTED_SERVICE_NAMES`: request-response forwarded, no `.sync`). This
module adds one, modelled on its `glue:startJobRun.sync` (`state_task_service_glue.py`):

- `startJobRun` calls EMR Serverless' StartJobRun with the task's parameters (Step Functions' PascalCase
  names, `ApplicationId`, `JobDriver.SparkSubmit.EntryPoint`…, normalised to the API's as LocalStack does for
  every service) and returns `ApplicationId`, `JobRunId`, `Arn`;
- `.sync` then polls GetJobRun until the run ends: SUCCESS gives the job run (PascalCase) as the task's
  result; FAILED or CANCELLED fail the task with `States.TaskFailed`, the cause being the job run (with its
  `StateDetails`), as the Glue integration does with a failed Glue run;
- an API error fails the task as `EMRServerless.<code>` (e.g. `EMRServerless.ValidationException`), the
  name Step Functions gives errors of this integration.

How it is installed: LocalStack builds a Task state's service integration with
`state_task_factory.state_task_service_for(service_name)`. The `localstack.hooks.on_infra_start` hook below
(entry point in localaws/plugin/pyproject.toml) wraps that function once, before any state machine is
created, so that `emr-serverless` gets this class and every other service LocalStack's own. Nothing else of
LocalStack is changed; a LocalStack whose factory moved would fail loudly at start (ImportError in the hook).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from localstack.runtime import hooks

LOG = logging.getLogger(__name__)
SERVICE_NAME = "emr-serverless"


@hooks.on_infra_start()
def patch_step_functions_for_emr_serverless() -> None:
    from localstack.services.stepfunctions.asl.component.state.state_execution.state_task import (
        state_task_factory,
    )

    original: Callable[[str], Any] = state_task_factory.state_task_service_for
    if getattr(original, "localaws_emr_serverless", False):
        return

    def state_task_service_for(service_name: str) -> Any:
        if service_name == SERVICE_NAME:
            from localaws_plugin.sfn_emr_serverless_task import StateTaskServiceEmrServerless

            return StateTaskServiceEmrServerless()
        return original(service_name)

    state_task_service_for.localaws_emr_serverless = True  # type: ignore[attr-defined]
    state_task_factory.state_task_service_for = state_task_service_for
    LOG.info("Step Functions: emr-serverless:startJobRun(.sync) served by localaws_plugin")
