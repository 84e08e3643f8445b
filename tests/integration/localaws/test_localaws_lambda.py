"""Lambda handlers run as host processes with the project's Python."""

import io
import json
import uuid
import zipfile

import pytest

pytestmark = pytest.mark.integration

HANDLER = """
import os
import sys

import boto3


def handler(event, context):
    print("handling", event)
    if event.get("fail"):
        raise ValueError("asked to fail")
    buckets = boto3.client("s3").list_buckets()["Buckets"]
    return {
        "greeting": os.environ["GREETING"],
        "python": list(sys.version_info[:2]),
        "endpoint": os.environ["AWS_ENDPOINT_URL"],
        "function_name": context.function_name,
        "remaining_ms_positive": context.get_remaining_time_in_millis() > 0,
        "buckets": len(buckets),
    }
"""

POWERTOOLS_HANDLER = """
from aws_lambda_powertools import Logger

logger = Logger(service="probe")


@logger.inject_lambda_context
def handler(event, context):
    logger.info("powertools says hi", extra={"n": event["n"]})
    return {"doubled": event["n"] * 2}
"""


def zipped(source: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("app.py", source)
    return buffer.getvalue()


def create_function(aws, source: str, environment: dict[str, str] | None = None) -> str:
    name = f"probe-{uuid.uuid4().hex[:8]}"
    client = aws("lambda")
    client.create_function(
        FunctionName=name,
        Runtime="python3.11",
        Role="arn:aws:iam::000000000000:role/lambda-role",
        Handler="app.handler",
        Code={"ZipFile": zipped(source)},
        Timeout=30,
        Environment={"Variables": environment or {}},
    )
    client.get_waiter("function_active_v2").wait(FunctionName=name)
    return name


def test_handler_runs_on_the_host_with_its_environment_and_the_local_endpoint(aws) -> None:
    name = create_function(aws, HANDLER, {"GREETING": "hello"})
    response = aws("lambda").invoke(FunctionName=name, Payload=json.dumps({"x": 1}).encode())
    assert "FunctionError" not in response
    result = json.loads(response["Payload"].read())
    assert result["greeting"] == "hello"
    assert result["python"] == [3, 11]
    assert result["endpoint"].startswith("http://127.0.0.1:")
    assert result["function_name"] == name
    assert result["remaining_ms_positive"] is True


def test_handler_errors_are_reported_like_lambda(aws) -> None:
    name = create_function(aws, HANDLER, {"GREETING": "hello"})
    response = aws("lambda").invoke(FunctionName=name, Payload=b'{"fail": true}')
    assert response["FunctionError"] == "Unhandled"
    error = json.loads(response["Payload"].read())
    assert error["errorType"] == "ValueError"
    assert error["errorMessage"] == "asked to fail"
    assert any("app.py" in frame for frame in error["stackTrace"])


def test_powertools_handler(aws) -> None:
    name = create_function(aws, POWERTOOLS_HANDLER, {"POWERTOOLS_SERVICE_NAME": "probe"})
    response = aws("lambda").invoke(FunctionName=name, Payload=b'{"n": 21}', LogType="Tail")
    assert "FunctionError" not in response
    assert json.loads(response["Payload"].read()) == {"doubled": 42}


LAYER_HANDLER = """
from lake_contracts.names import decode_key


def handler(event, context):
    return {"key": decode_key(event["key"])}
"""


def _contracts_layer(aws) -> str:
    """functions/shared/lake_contracts as `sam build` packages the layer (under python/): its version ARN."""
    from pathlib import Path

    shared = Path(__file__).resolve().parents[3] / "functions" / "shared"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for source in sorted((shared / "lake_contracts").glob("*.py")):
            archive.write(source, f"python/lake_contracts/{source.name}")
    published = aws("lambda").publish_layer_version(
        LayerName=f"contracts-{uuid.uuid4().hex[:8]}",
        Content={"ZipFile": buffer.getvalue()},
        CompatibleRuntimes=["python3.11"],
    )
    return published["LayerVersionArn"]


def test_a_function_imports_the_shared_contracts_from_its_layer(aws) -> None:
    """Given the contracts layer as sam build packages it and a function whose code has no copy of it, When
    invoked on the local AWS, Then the function imports it from the layer (python/ on its path, as on AWS)."""
    layer = _contracts_layer(aws)
    name = f"probe-{uuid.uuid4().hex[:8]}"
    client = aws("lambda")
    client.create_function(
        FunctionName=name,
        Runtime="python3.11",
        Role="arn:aws:iam::000000000000:role/lambda-role",
        Handler="app.handler",
        Code={"ZipFile": zipped(LAYER_HANDLER)},
        Layers=[layer],
        Timeout=30,
    )
    client.get_waiter("function_active_v2").wait(FunctionName=name)
    response = client.invoke(
        FunctionName=name, Payload=json.dumps({"key": "dms/plus+sign/a%20b.csv"}).encode()
    )
    assert "FunctionError" not in response, response["Payload"].read()
    assert json.loads(response["Payload"].read()) == {"key": "dms/plus+sign/a b.csv"}


def test_a_function_whose_environment_is_invalid_fails_its_init_naming_the_variable(aws) -> None:
    """Given the watchdog's own code with its layer and no STATE_MACHINE_ARN, When invoked, Then the invoke
    fails at init with the error naming the variable (not at the first call with an empty ARN)."""
    from pathlib import Path

    folder = Path(__file__).resolve().parents[3] / "functions" / "watchdog"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for source in sorted(folder.glob("*.py")):
            archive.write(source, source.name)
    name = f"watchdog-{uuid.uuid4().hex[:8]}"
    client = aws("lambda")
    client.create_function(
        FunctionName=name,
        Runtime="python3.11",
        Role="arn:aws:iam::000000000000:role/lambda-role",
        Handler="app.handler",
        Code={"ZipFile": buffer.getvalue()},
        Layers=[_contracts_layer(aws)],
        Timeout=30,
        Environment={"Variables": {"POWERTOOLS_TRACE_DISABLED": "1"}},
    )
    client.get_waiter("function_active_v2").wait(FunctionName=name)
    response = client.invoke(FunctionName=name, Payload=b"{}")
    assert response.get("FunctionError") == "Unhandled"
    error = json.loads(response["Payload"].read())
    assert "STATE_MACHINE_ARN (not set)" in error["errorMessage"], error
