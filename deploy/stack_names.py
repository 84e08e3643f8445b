"""The names the stack gives its resources, computed from template.yaml for an environment, account and region,
before anything exists: how long each is against the service's limit, and which ones a deleted or rolled-back
stack leaves behind (DeletionPolicy: Retain) for the next create to collide with."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

TEMPLATE = Path(__file__).resolve().parents[1] / "template.yaml"

# resource type -> (path of its name property, the service's longest name)
NAME_PROPERTIES: dict[str, tuple[tuple[str, ...], int]] = {
    "AWS::S3::Bucket": (("BucketName",), 63),
    "AWS::SQS::Queue": (("QueueName",), 80),
    "AWS::Serverless::Function": (("FunctionName",), 64),
    "AWS::Serverless::LayerVersion": (("LayerName",), 140),
    "AWS::Serverless::StateMachine": (("Name",), 80),
    "AWS::Glue::Job": (("Name",), 255),
    "AWS::Glue::Database": (("DatabaseInput", "Name"), 255),
    "AWS::Glue::Connection": (("ConnectionInput", "Name"), 255),
    "AWS::Glue::SecurityConfiguration": (("Name",), 255),
    "AWS::Logs::LogGroup": (("LogGroupName",), 512),
    "AWS::CloudWatch::Alarm": (("AlarmName",), 255),
    "AWS::CloudWatch::Dashboard": (("DashboardName",), 255),
    "AWS::EMRServerless::Application": (("Name",), 64),
    "AWS::DMS::ReplicationTask": (("ReplicationTaskIdentifier",), 255),
    "AWS::KMS::Alias": (("AliasName",), 256),
    "AWS::Athena::WorkGroup": (("Name",), 128),
    "AWS::Athena::NamedQuery": (("Name",), 128),
    "AWS::QuickSight::DataSource": (("Name",), 128),
    "AWS::QuickSight::DataSet": (("Name",), 128),
}


@dataclass(frozen=True)
class NamedResource:
    logical_id: str
    type: str
    name: str
    limit: int
    retained: bool


class _Loader:
    """YAML with CloudFormation's short tags read as their long forms (`!Sub x` -> {"Fn::Sub": x})."""

    @staticmethod
    def load(text: str) -> dict[str, Any]:
        import yaml

        class Loader(yaml.SafeLoader):
            pass

        def tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
            if isinstance(node, yaml.ScalarNode):
                value: Any = loader.construct_scalar(node)
                if suffix == "GetAtt":
                    value = str(value).split(".", 1)
            elif isinstance(node, yaml.SequenceNode):
                value = loader.construct_sequence(node, deep=True)
            else:
                value = loader.construct_mapping(node, deep=True)
            return {"Ref": value} if suffix == "Ref" else {f"Fn::{suffix}": value}

        Loader.add_multi_constructor("!", tag)
        return yaml.load(text, Loader=Loader) or {}  # a SafeLoader subclass


@cache
def template(path: Path = TEMPLATE) -> dict[str, Any]:
    return load_template(path)


def load_template(path: Path = TEMPLATE) -> dict[str, Any]:
    """The template as it is on disk now (`template` keeps the first read of a path)."""
    return _Loader.load(path.read_text())


def parameter_defaults(path: Path = TEMPLATE) -> dict[str, str]:
    """Each parameter's default as sam deploy would send it (text); a parameter without one is left out."""
    parameters = template(path).get("Parameters", {})
    return {name: str(p["Default"]) for name, p in parameters.items() if "Default" in p}


def _text(value: Any, values: Mapping[str, str]) -> str | None:
    """A name property as text: literal or `!Sub` of known values; None when it depends on something else."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) == {"Fn::Sub"} and isinstance(value["Fn::Sub"], str):
        unknown = [m for m in re.findall(r"\$\{([^}]+)\}", value["Fn::Sub"]) if m not in values]
        if unknown:
            return None
        return re.sub(r"\$\{([^}]+)\}", lambda m: values[m[1]], value["Fn::Sub"])
    return None


def named_resources(
    parameters: Mapping[str, str], account: str, region: str, stack_name: str, path: Path = TEMPLATE
) -> list[NamedResource]:
    """Every resource whose name the template sets, with the name it gets (in the order the template has them;
    a name built on another resource's name, e.g. a Lambda's log group, after that one's)."""
    values = dict(parameter_defaults(path)) | dict(parameters)
    values |= {"AWS::AccountId": account, "AWS::Region": region, "AWS::StackName": stack_name}
    values.setdefault("AWS::Partition", "aws")
    resources = template(path).get("Resources", {})
    found: dict[str, NamedResource] = {}
    for _ in range(2):  # a second pass resolves names that read the first pass's
        for logical_id, resource in resources.items():
            if logical_id in found or resource.get("Type") not in NAME_PROPERTIES:
                continue
            path_to_name, limit = NAME_PROPERTIES[resource["Type"]]
            value: Any = resource.get("Properties", {})
            for key in path_to_name:
                value = value.get(key) if isinstance(value, dict) else None
            name = _text(value, values | {k: r.name for k, r in found.items()})
            if name is not None:
                retained = resource.get("DeletionPolicy") == "Retain"
                found[logical_id] = NamedResource(logical_id, resource["Type"], name, limit, retained)
    order = list(resources)
    return sorted(found.values(), key=lambda r: order.index(r.logical_id))


def too_long(resources: list[NamedResource]) -> list[NamedResource]:
    return [r for r in resources if len(r.name) > r.limit]
