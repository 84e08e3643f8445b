"""CloudFormation resource providers for AWS::Glue::Job, ::Database, ::Table and ::SecurityConfiguration
(community LocalStack skips them).

Each calls the Glue API in LocalStack (our Glue provider, moto-backed), so `sam deploy` creates real jobs.
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

JOB_FIELDS = (
    "Description",
    "LogUri",
    "Role",
    "ExecutionProperty",
    "Command",
    "DefaultArguments",
    "NonOverridableArguments",
    "Connections",
    "MaxRetries",
    "AllocatedCapacity",
    "Timeout",
    "MaxCapacity",
    "SecurityConfiguration",
    "NotificationProperty",
    "GlueVersion",
    "NumberOfWorkers",
    "WorkerType",
    "ExecutionClass",
    "JobMode",
    "MaintenanceWindow",
)


def _success(request: ResourceRequest, model: dict[str, Any]) -> ProgressEvent:
    return ProgressEvent(
        status=OperationStatus.SUCCESS, resource_model=model, custom_context=request.custom_context
    )


def _job_parameters(model: dict[str, Any]) -> dict[str, Any]:
    parameters = {key: model[key] for key in JOB_FIELDS if model.get(key) is not None}
    for arguments in ("DefaultArguments", "NonOverridableArguments"):
        if arguments in parameters:  # CloudFormation passes job arguments as strings (a !Sub of a Number too)
            parameters[arguments] = {k: str(v) for k, v in parameters[arguments].items()}
    return parameters


class GlueJobProvider(ResourceProvider[dict]):
    TYPE = "AWS::Glue::Job"
    SCHEMA: ClassVar[dict[str, Any]] = {
        "typeName": TYPE,
        "primaryIdentifier": ["/properties/Name"],
        "properties": {key: {} for key in ("Name", "Tags", *JOB_FIELDS)},
    }

    def create(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        model = request.desired_state
        model.setdefault("Name", generate_default_name(request.stack_name, request.logical_resource_id))
        glue = request.aws_client_factory.glue
        glue.create_job(Name=model["Name"], Tags=model.get("Tags") or {}, **_job_parameters(model))
        return _success(request, model)

    def read(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        job = request.aws_client_factory.glue.get_job(JobName=request.desired_state["Name"])["Job"]
        return _success(request, {**job, "Name": job["Name"]})

    def update(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        model = request.desired_state
        model.setdefault("Name", (request.previous_state or {}).get("Name"))
        request.aws_client_factory.glue.update_job(JobName=model["Name"], JobUpdate=_job_parameters(model))
        return _success(request, model)

    def delete(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        glue = request.aws_client_factory.glue
        with contextlib.suppress(glue.exceptions.EntityNotFoundException):
            glue.delete_job(JobName=request.desired_state["Name"])
        return _success(request, request.desired_state)


class GlueDatabaseProvider(ResourceProvider[dict]):
    TYPE = "AWS::Glue::Database"
    SCHEMA: ClassVar[dict[str, Any]] = {
        "typeName": TYPE,
        "primaryIdentifier": ["/properties/DatabaseName"],
        "properties": {"CatalogId": {}, "DatabaseInput": {}, "DatabaseName": {}},
    }

    def create(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        model = request.desired_state
        database_input = dict(model.get("DatabaseInput") or {})
        name = database_input.get("Name") or model.get("DatabaseName")
        if not name:
            name = generate_default_name(request.stack_name, request.logical_resource_id).lower()
        database_input["Name"] = model["DatabaseName"] = name
        glue = request.aws_client_factory.glue
        with contextlib.suppress(glue.exceptions.AlreadyExistsException):
            glue.create_database(DatabaseInput=database_input)
        return _success(request, model)

    def read(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        database = request.aws_client_factory.glue.get_database(Name=request.desired_state["DatabaseName"])
        return _success(request, {**request.desired_state, "DatabaseName": database["Database"]["Name"]})

    def update(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        model = request.desired_state
        database_input = dict(model.get("DatabaseInput") or {})
        name = (request.previous_state or {}).get("DatabaseName") or database_input.get("Name")
        database_input.setdefault("Name", name)
        model["DatabaseName"] = database_input["Name"]
        request.aws_client_factory.glue.update_database(Name=name, DatabaseInput=database_input)
        return _success(request, model)

    def delete(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        glue = request.aws_client_factory.glue
        with contextlib.suppress(glue.exceptions.EntityNotFoundException):
            glue.delete_database(Name=request.desired_state["DatabaseName"])
        return _success(request, request.desired_state)


class GlueTableProvider(ResourceProvider[dict]):
    TYPE = "AWS::Glue::Table"
    SCHEMA: ClassVar[dict[str, Any]] = {
        "typeName": TYPE,
        "primaryIdentifier": ["/properties/TableName"],
        "properties": {"CatalogId": {}, "DatabaseName": {}, "TableInput": {}, "TableName": {}},
    }

    def create(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        model = request.desired_state
        table_input = dict(model["TableInput"])
        table_input.setdefault(
            "Name", generate_default_name(request.stack_name, request.logical_resource_id).lower()
        )
        model["TableName"] = table_input["Name"]
        request.aws_client_factory.glue.create_table(
            DatabaseName=model["DatabaseName"], TableInput=table_input
        )
        return _success(request, model)

    def read(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        model = request.desired_state
        request.aws_client_factory.glue.get_table(DatabaseName=model["DatabaseName"], Name=model["TableName"])
        return _success(request, model)

    def update(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        model = request.desired_state
        table_input = dict(model["TableInput"])
        table_input.setdefault("Name", (request.previous_state or {}).get("TableName"))
        model["TableName"] = table_input["Name"]
        request.aws_client_factory.glue.update_table(
            DatabaseName=model["DatabaseName"], TableInput=table_input
        )
        return _success(request, model)

    def delete(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        model = request.desired_state
        glue = request.aws_client_factory.glue
        with contextlib.suppress(glue.exceptions.EntityNotFoundException):
            glue.delete_table(DatabaseName=model["DatabaseName"], Name=model["TableName"])
        return _success(request, model)


class GlueSecurityConfigurationProvider(ResourceProvider[dict]):
    TYPE = "AWS::Glue::SecurityConfiguration"
    SCHEMA: ClassVar[dict[str, Any]] = {
        "typeName": TYPE,
        "primaryIdentifier": ["/properties/Name"],
        "properties": {"Name": {}, "EncryptionConfiguration": {}},
    }

    def create(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        model = request.desired_state
        model.setdefault("Name", generate_default_name(request.stack_name, request.logical_resource_id))
        glue = request.aws_client_factory.glue
        with contextlib.suppress(glue.exceptions.AlreadyExistsException):
            glue.create_security_configuration(
                Name=model["Name"], EncryptionConfiguration=model.get("EncryptionConfiguration") or {}
            )
        return _success(request, model)

    def read(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        glue = request.aws_client_factory.glue
        found = glue.get_security_configuration(Name=request.desired_state["Name"])["SecurityConfiguration"]
        return _success(request, {**request.desired_state, "Name": found["Name"]})

    def update(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        """Security configurations cannot be changed in place: the old one goes, the new one comes."""
        glue = request.aws_client_factory.glue
        previous = (request.previous_state or {}).get("Name")
        if previous:
            with contextlib.suppress(glue.exceptions.EntityNotFoundException):
                glue.delete_security_configuration(Name=previous)
        return self.create(request)

    def delete(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        glue = request.aws_client_factory.glue
        with contextlib.suppress(glue.exceptions.EntityNotFoundException):
            glue.delete_security_configuration(Name=request.desired_state["Name"])
        return _success(request, request.desired_state)


class _ProviderPlugin(CloudFormationResourceProviderPlugin):
    provider_class: type[ResourceProvider]

    def __init__(self) -> None:
        self.factory: type[ResourceProvider] | None = None

    def load(self) -> None:
        self.factory = self.provider_class


class GlueJobProviderPlugin(_ProviderPlugin):
    name = "AWS::Glue::Job"
    provider_class = GlueJobProvider


class GlueDatabaseProviderPlugin(_ProviderPlugin):
    name = "AWS::Glue::Database"
    provider_class = GlueDatabaseProvider


class GlueTableProviderPlugin(_ProviderPlugin):
    name = "AWS::Glue::Table"
    provider_class = GlueTableProvider


class GlueSecurityConfigurationProviderPlugin(_ProviderPlugin):
    name = "AWS::Glue::SecurityConfiguration"
    provider_class = GlueSecurityConfigurationProvider
