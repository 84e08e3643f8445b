"""The `emr-serverless` Task state of LocalStack's Step Functions (installed by sfn_emr_serverless)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from botocore.exceptions import ClientError
from localstack.aws.api.stepfunctions import HistoryEventType, TaskFailedEventDetails
from localstack.services.stepfunctions.asl.component.common.error_name.custom_error_name import (
    CustomErrorName,
)
from localstack.services.stepfunctions.asl.component.common.error_name.failure_event import (
    FailureEvent,
    FailureEventException,
)
from localstack.services.stepfunctions.asl.component.common.error_name.states_error_name import (
    StatesErrorName,
)
from localstack.services.stepfunctions.asl.component.common.error_name.states_error_name_type import (
    StatesErrorNameType,
)
from localstack.services.stepfunctions.asl.component.state.state_execution.state_task.credentials import (
    StateCredentials,
)
from localstack.services.stepfunctions.asl.component.state.state_execution.state_task.service.resource import (
    ResourceCondition,
    ResourceRuntimePart,
)
from localstack.services.stepfunctions.asl.component.state.state_execution.state_task.service.state_task_service_callback import (
    StateTaskServiceCallback,
)
from localstack.services.stepfunctions.asl.eval.environment import Environment
from localstack.services.stepfunctions.asl.eval.event.event_detail import EventDetails
from localstack.services.stepfunctions.asl.utils.boto_client import boto_client_for
from localstack.services.stepfunctions.asl.utils.encoding import to_json_str

from localaws_plugin.emr_serverless_runs import TERMINAL_STATES, step_functions_error

_SUPPORTED_INTEGRATION_PATTERNS: Final[set[ResourceCondition]] = {ResourceCondition.Sync}

# Step Functions' startJobRun parameters (the API's, PascalCase; ClientToken is filled in when absent).
_SUPPORTED_API_PARAM_BINDINGS: Final[dict[str, set[str]]] = {
    "startjobrun": {
        "ApplicationId",
        "ClientToken",
        "ExecutionRoleArn",
        "JobDriver",
        "ConfigurationOverrides",
        "Tags",
        "ExecutionTimeoutMinutes",
        "Name",
        "Mode",
        "RetryPolicy",
    }
}

_FAILED_STATES: Final[set[str]] = {"FAILED", "CANCELLED"}


class StateTaskServiceEmrServerless(StateTaskServiceCallback):
    def __init__(self) -> None:
        super().__init__(supported_integration_patterns=_SUPPORTED_INTEGRATION_PATTERNS)

    def _get_supported_parameters(self) -> set[str] | None:
        return _SUPPORTED_API_PARAM_BINDINGS.get(self.resource.api_action.lower())

    @staticmethod
    def _client(resource_runtime_part: ResourceRuntimePart, state_credentials: StateCredentials) -> Any:
        return boto_client_for(
            service="emr-serverless",
            region=resource_runtime_part.region,
            state_credentials=state_credentials,
        )

    def _from_error(self, env: Environment, ex: Exception) -> FailureEvent:
        if isinstance(ex, ClientError):
            error_name = step_functions_error(ex.response["Error"]["Code"])
            return FailureEvent(
                env=env,
                error_name=CustomErrorName(error_name),
                event_type=HistoryEventType.TaskFailed,
                event_details=EventDetails(
                    taskFailedEventDetails=TaskFailedEventDetails(
                        error=error_name,
                        cause=ex.response["Error"]["Message"],
                        resource=self._get_sfn_resource(),
                        resourceType=self._get_sfn_resource_type(),
                    )
                ),
            )
        return super()._from_error(env=env, ex=ex)

    def _wait_for_task_token(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(f"Unsupported .waitForTaskToken in resource {self.resource.resource_arn}")

    def _eval_service_task(
        self,
        env: Environment,
        resource_runtime_part: ResourceRuntimePart,
        normalised_parameters: dict,
        state_credentials: StateCredentials,
    ) -> None:
        action = self._get_boto_service_action()
        if action != "start_job_run":
            raise ValueError(f"Unsupported emr-serverless action '{action}' (startJobRun only)")
        client = self._client(resource_runtime_part, state_credentials)
        response = client.start_job_run(**normalised_parameters)
        response.pop("ResponseMetadata", None)
        env.stack.append(response)

    def _build_sync_resolver(
        self,
        env: Environment,
        resource_runtime_part: ResourceRuntimePart,
        normalised_parameters: dict,
        state_credentials: StateCredentials,
    ) -> Callable[[], Any | None]:
        started: dict = env.stack.pop()  # StartJobRun's output, normalised: ApplicationId, JobRunId, Arn
        application_id = started["ApplicationId"]
        job_run_id = started["JobRunId"]
        client = self._client(resource_runtime_part, state_credentials)

        def _sync_resolver() -> Any | None:
            response = client.get_job_run(applicationId=application_id, jobRunId=job_run_id)
            response.pop("ResponseMetadata", None)
            if response["jobRun"]["state"] not in TERMINAL_STATES:
                return None
            self._normalise_response(response, service_action_name="GetJobRun")
            job_run: dict = response["JobRun"]
            if job_run["State"] not in _FAILED_STATES:
                return job_run
            raise FailureEventException(
                FailureEvent(
                    env=env,
                    error_name=StatesErrorName(typ=StatesErrorNameType.StatesTaskFailed),
                    event_type=HistoryEventType.TaskFailed,
                    event_details=EventDetails(
                        taskFailedEventDetails=TaskFailedEventDetails(
                            resource=self._get_sfn_resource(),
                            resourceType=self._get_sfn_resource_type(),
                            error=StatesErrorNameType.StatesTaskFailed.to_name(),
                            cause=to_json_str(job_run),
                        )
                    ),
                )
            )

        return _sync_resolver
