"""`localstack.aws.provider` entry points: services community LocalStack lacks, served by moto plus our overrides."""

from __future__ import annotations

from typing import Any

from localstack.aws.api import RequestContext, ServiceRequest, ServiceResponse
from localstack.aws.skeleton import DispatchTable, Skeleton, create_dispatch_table
from localstack.aws.spec import load_service
from localstack.services.plugins import Service, ServiceLifecycleHook, aws_provider


def _call_moto(context: RequestContext, request: ServiceRequest) -> ServiceResponse:
    from localstack.services.moto import call_moto

    return call_moto(context)


def moto_backed_service(service_name: str, overrides: Any) -> Service:
    """A Service whose operations are the @handler methods of `overrides`, and moto's for all the others."""
    service_model = load_service(service_name)
    table: DispatchTable = create_dispatch_table(overrides)
    for operation in service_model.operation_names:
        table.setdefault(operation, _call_moto)
    hook = overrides if isinstance(overrides, ServiceLifecycleHook) else None
    service = Service(name=service_name, skeleton=Skeleton(service_model, table), lifecycle_hook=hook)
    service._provider = overrides
    return service


@aws_provider(api="glue")
def glue() -> Service:
    from localaws_plugin.glue_provider import GlueJobRunsProvider

    return moto_backed_service("glue", GlueJobRunsProvider())


@aws_provider(api="dms")
def dms() -> Service:
    from localaws_plugin.dms_provider import DmsReplicationProvider

    return moto_backed_service("dms", DmsReplicationProvider())


@aws_provider(api="emr-serverless")
def emr_serverless() -> Service:
    from localaws_plugin.emr_serverless_provider import EmrServerlessJobRunsProvider

    return moto_backed_service("emr-serverless", EmrServerlessJobRunsProvider())
