"""Build and deploy the SAM app (template.yaml, unchanged) to the embedded local AWS.

    sam build && sam deploy --config-env local     (what this runs, with the SAM CLI of .venv-sam)

Also: upload the Glue scripts and lakehouse.zip to the artifacts bucket, read stack outputs, delete a
stack. `sam build` needs no container: the functions are python3.11 and so is the project's venv,
which is put first on PATH for it.
"""

from __future__ import annotations

import os
import subprocess
import time
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from deploy.glue_artifacts import lakehouse_zip, upload_glue_artifacts  # noqa: F401 - re-exported
from deploy.parameter_rules import declarations as template_parameter_declarations
from deploy.parameter_rules import refused as refused_parameters
from localaws import setup_sam

REPO_ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = REPO_ROOT / "template.yaml"
SAMCONFIG = REPO_ROOT / "samconfig.toml"
BUILD_DIR = REPO_ROOT / ".aws-sam" / "build"
PROJECT_BIN = REPO_ROOT / ".venv" / "bin"
SPARK_JOBS = REPO_ROOT / "spark_jobs"
REGION = "us-east-1"


class DeployError(RuntimeError):
    pass


def aws_environment(endpoint_url: str) -> dict[str, str]:
    """Environment for the SAM CLI and boto3 aimed at the local stack: dummy credentials, one region."""
    env = dict(os.environ)
    env.update(
        {
            "AWS_ENDPOINT_URL": endpoint_url,
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION,
            "SAM_CLI_TELEMETRY": "0",
            "SAM_CLI_DISABLE_UPDATE_CHECK": env.get("SAM_CLI_DISABLE_UPDATE_CHECK", "1"),
            "PATH": f"{PROJECT_BIN}{os.pathsep}{env.get('PATH', '')}",
        }
    )
    env.pop("AWS_PROFILE", None)
    env.pop("AWS_SESSION_TOKEN", None)
    return env


def template_parameters(template: Path = TEMPLATE) -> set[str]:
    """Names of the template's Parameters."""
    return set(template_parameter_defaults(template))


def template_parameter_defaults(template: Path = TEMPLATE) -> dict[str, str | None]:
    """The template's Parameters and their defaults."""
    declared = template_parameter_declarations(template)
    return {name: None if "Default" not in p else str(p["Default"]) for name, p in declared.items()}


def first_declared(candidates: tuple[str, ...], declared: set[str]) -> str | None:
    return next((name for name in candidates if name in declared), None)


def samconfig_parameters(config_env: str = "local") -> dict[str, str]:
    """`parameter_overrides` of the deploy command of a samconfig.toml environment, as a dict
    (command-line overrides replace the whole list, so callers merge onto these)."""
    if not SAMCONFIG.exists():
        return {}
    document = tomllib.loads(SAMCONFIG.read_text())
    section = document.get(config_env, {})
    overrides = (
        section.get("deploy", {}).get("parameters", {}).get("parameter_overrides")
        or section.get("global", {}).get("parameters", {}).get("parameter_overrides")
        or []
    )
    if isinstance(overrides, str):
        overrides = _split_overrides(overrides)
    pairs = (item.split("=", 1) for item in overrides if "=" in item)
    return {k.strip(): v.strip().strip('"') for k, v in pairs}


def _split_overrides(text: str) -> list[str]:
    items, current, quoted = [], "", False
    for char in text:
        if char == '"':
            quoted = not quoted
        if char == " " and not quoted:
            if current:
                items.append(current)
            current = ""
            continue
        current += char
    if current:
        items.append(current)
    return items


def _run(command: list[str], endpoint_url: str, what: str, timeout: float) -> str:
    started = time.monotonic()
    result = subprocess.run(
        command,
        cwd=REPO_ROOT,
        env=aws_environment(endpoint_url),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise DeployError(
            f"{what} failed ({result.returncode}) after {time.monotonic() - started:.0f}s:\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return result.stdout + result.stderr


def build_dir(endpoint_url: str) -> Path:
    """Where `sam build` writes for the local AWS at `endpoint_url`: .aws-sam/build on the default port, a
    folder of its own on another (two local AWSs building at once never deploy each other's half-built app).
    LOCALAWS_SAM_BUILD_DIR names one folder for every port: the parallel tests' workers, each with its local AWS,
    deploy one build (made once, under a lock: tests/integration/pipeline/conftest.py)."""
    if shared := os.environ.get("LOCALAWS_SAM_BUILD_DIR"):
        return Path(shared)
    port = urlparse(endpoint_url).port
    return BUILD_DIR if port in (None, 4566) else BUILD_DIR.with_name(f"build-{port}")


def build(endpoint_url: str, timeout: float = 600) -> None:
    """`sam build` (no container; the project's python3.11 first on PATH)."""
    sam = str(setup_sam.install())
    target = build_dir(endpoint_url)
    # --parallel: the seven functions' dependencies install at once; --cached: unchanged ones are reused
    command = [sam, "build", "--template-file", str(TEMPLATE), "--parallel", "--cached"]
    cache = target.with_name("cache" if target == BUILD_DIR else f"cache-{target.name}")
    command += ["--build-dir", str(target), "--cache-dir", str(cache)]
    _run(command, endpoint_url, "sam build", timeout)


def build_once(endpoint_url: str, run: str, timeout: float = 600) -> bool:
    """`build` unless this `run` (an id shared by the processes of one test run: pytest-xdist's workers) built
    the folder already; processes wait for each other on a lock beside it, so one builds and the others deploy
    that build. Returns whether this call built."""
    import fcntl

    target = build_dir(endpoint_url)
    target.parent.mkdir(parents=True, exist_ok=True)
    built_by = target.with_name(f"{target.name}.run")
    with target.with_name(f"{target.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if built_by.exists() and built_by.read_text() == run:
            return False
        build(endpoint_url, timeout)
        built_by.write_text(run)
        return True


def package(endpoint_url: str, output: Path, timeout: float = 900) -> Path:
    """`sam package` of the built template into the SAM bucket of the local AWS at `endpoint_url`: `output` is a
    template whose functions, layer and state machine definition are S3 objects already, so that every stack
    deployed from it (`deploy(template=output)`) skips zipping and uploading them again (≈ 40 s a deploy)."""
    sam = str(setup_sam.install())
    output.parent.mkdir(parents=True, exist_ok=True)
    command = [
        sam,
        "package",
        "--template-file",
        str(build_dir(endpoint_url) / "template.yaml"),
        "--output-template-file",
        str(output),
        "--resolve-s3",
        "--region",
        REGION,
    ]
    _run(command, endpoint_url, "sam package", timeout)
    return output


def deploy(
    endpoint_url: str,
    stack_name: str,
    parameters: Mapping[str, str] | None = None,
    config_env: str = "local",
    timeout: float = 900,
    template: Path | None = None,
) -> dict[str, str]:
    """`sam deploy --config-env <env>` of the built template (or of `template`, one `package` made) as
    `stack_name`, the samconfig's parameters overridden by `parameters`. Returns the stack outputs."""
    sam = str(setup_sam.install())
    merged = samconfig_parameters(config_env) | dict(parameters or {})
    template_file = template or build_dir(endpoint_url) / "template.yaml"
    refusals = refused_parameters(merged, template_parameter_declarations(template_file))
    if refusals:  # what CloudFormation answers on AWS, before any change set
        raise DeployError(
            f"sam deploy {stack_name}: parameters CloudFormation refuses: " + "; ".join(refusals)
        )
    command = [
        sam,
        "deploy",
        "--config-env",
        config_env,
        "--stack-name",
        stack_name,
        "--template-file",
        str(template_file),
        "--config-file",
        str(SAMCONFIG),  # else looked for beside the template
        "--no-confirm-changeset",
        "--no-fail-on-empty-changeset",
        "--region",
        REGION,
    ]
    if merged:
        command += ["--parameter-overrides", *[f"{k}={v}" for k, v in merged.items()]]
    _run(command, endpoint_url, f"sam deploy {stack_name}", timeout)
    return stack_outputs(client("cloudformation", endpoint_url), stack_name)


def client(service: str, endpoint_url: str) -> Any:
    """A boto3 client of the local AWS at `endpoint_url`, from localstack-client's endpoint map; services
    that map does not list (DMS, served here by our plugin) use the same edge endpoint."""
    import boto3
    from localstack_client.config import get_service_endpoints

    endpoints = get_service_endpoints(localstack_host=urlparse(endpoint_url).netloc)
    return boto3.client(
        service,
        endpoint_url=endpoints.get(service, endpoint_url),
        region_name=REGION,
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )


def stack_outputs(cloudformation: Any, stack_name: str) -> dict[str, str]:
    stack = cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


def stack_resources(cloudformation: Any, stack_name: str) -> dict[str, str]:
    """Logical id → physical id of every resource of the stack."""
    resources = cloudformation.describe_stack_resources(StackName=stack_name)["StackResources"]
    return {r["LogicalResourceId"]: r.get("PhysicalResourceId", "") for r in resources}


def delete_stack(cloudformation: Any, stack_name: str, timeout: float = 120) -> None:
    cloudformation.delete_stack(StackName=stack_name)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            status = cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0]["StackStatus"]
        except Exception:  # gone
            return
        if status in ("DELETE_COMPLETE", "DELETE_FAILED"):
            return
        time.sleep(1)


@dataclass(frozen=True)
class DeployedApp:
    """A deployed stack: its name, outputs and resources (logical id → physical id)."""

    stack_name: str
    outputs: dict[str, str]
    resources: dict[str, str]

    def resource(self, logical_id: str) -> str:
        return self.resources[logical_id]
