"""CloudFormation resource provider for AWS::EMRServerless::Application (community LocalStack has none).

It calls the EMR Serverless API in LocalStack (moto keeps the application; our provider runs its job runs),
so `sam deploy` of SparkEngine=emr-serverless creates a real application. Ref = ApplicationId; GetAtt
ApplicationId and Arn. The properties the local runs need are passed on (name, release, type, auto
start/stop, capacities); the image, runtime and scheduler settings are AWS's concern and kept in the model.
"""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar

from localstack.services.cloudformation.provider_utils import generate_default_name
from localstack.services.cloudformation.resource_provider import (
    CloudFormationResourceProviderPlugin,
    OperationStatus,
    ProgressEvent,
    ResourceProvider,
    ResourceRequest,
)

from localaws_plugin.emr_serverless_runs import application_request

PROPERTIES = (
    "Name",
    "ReleaseLabel",
    "Type",
    "Architecture",
    "AutoStartConfiguration",
    "AutoStopConfiguration",
    "InitialCapacity",
    "MaximumCapacity",
    "ImageConfiguration",
    "RuntimeConfiguration",
    "SchedulerConfiguration",
    "MonitoringConfiguration",
    "NetworkConfiguration",
    "WorkerTypeSpecifications",
    "InteractiveConfiguration",
    "Tags",
)


def _success(request: ResourceRequest, model: dict[str, Any]) -> ProgressEvent:
    return ProgressEvent(
        status=OperationStatus.SUCCESS, resource_model=model, custom_context=request.custom_context
    )


class EmrServerlessApplicationProvider(ResourceProvider[dict]):
    TYPE = "AWS::EMRServerless::Application"
    SCHEMA: ClassVar[dict[str, Any]] = {
        "typeName": TYPE,
        "primaryIdentifier": ["/properties/ApplicationId"],
        "readOnlyProperties": ["/properties/ApplicationId", "/properties/Arn"],
        "properties": {key: {} for key in ("ApplicationId", "Arn", *PROPERTIES)},
    }

    def create(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        model = request.desired_state
        model.setdefault("Name", generate_default_name(request.stack_name, request.logical_resource_id))
        created = request.aws_client_factory.emr_serverless.create_application(**application_request(model))
        model["ApplicationId"] = created["applicationId"]
        model["Arn"] = created["arn"]
        return _success(request, model)

    def read(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        application = request.aws_client_factory.emr_serverless.get_application(
            applicationId=request.desired_state["ApplicationId"]
        )["application"]
        return _success(
            request,
            {
                **request.desired_state,
                "ApplicationId": application["applicationId"],
                "Arn": application["arn"],
            },
        )

    def update(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        """Locally nothing a run uses changes in place: the application keeps its id."""
        model = request.desired_state
        previous = request.previous_state or {}
        model["ApplicationId"] = previous.get("ApplicationId")
        model["Arn"] = previous.get("Arn")
        return _success(request, model)

    def delete(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        client = request.aws_client_factory.emr_serverless
        application_id = request.desired_state.get("ApplicationId")
        if application_id:
            with contextlib.suppress(client.exceptions.ResourceNotFoundException):
                client.stop_application(applicationId=application_id)  # only a stopped one can be deleted
                client.delete_application(applicationId=application_id)
        return _success(request, request.desired_state)


class EmrServerlessApplicationProviderPlugin(CloudFormationResourceProviderPlugin):
    name = "AWS::EMRServerless::Application"

    def __init__(self) -> None:
        self.factory: type[ResourceProvider] | None = None

    def load(self) -> None:
        self.factory = EmrServerlessApplicationProvider
