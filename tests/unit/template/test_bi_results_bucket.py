"""Least privilege for BI: Athena's results have their own bucket; QuickSight gets nothing of the artifacts."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.unit.template.test_template import REPO


def _walk(node: Any):
    yield node
    if isinstance(node, dict):
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def test_the_bi_workgroup_writes_its_results_to_their_own_bucket(template):
    """Given the template
    When the BI workgroup's result location is read
    Then it is the results bucket (encrypted, private, TLS only, results expiring), not the artifacts bucket."""
    resources = template["Resources"]
    location = resources["AthenaWorkGroup"]["Properties"]["WorkGroupConfiguration"]["ResultConfiguration"]
    bucket = resources["AthenaResultsBucket"]["Properties"]
    policy = resources["AthenaResultsBucketPolicy"]["Properties"]
    rules = bucket["LifecycleConfiguration"]["Rules"]

    assert location["OutputLocation"] == {"Fn::Sub": "s3://${AthenaResultsBucket}/athena/"}
    assert "ArtifactsBucket" not in json.dumps(location)
    assert location["EncryptionConfiguration"] == {"EncryptionOption": "SSE_S3"}
    assert bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
    assert set(bucket["PublicAccessBlockConfiguration"].values()) == {True}
    assert len(bucket["PublicAccessBlockConfiguration"]) == 4
    assert [(r["Status"], r.get("Prefix"), r["ExpirationInDays"]) for r in rules] == [("Enabled", None, 30)]
    assert policy["Bucket"] == {"Ref": "AthenaResultsBucket"}
    [tls] = policy["PolicyDocument"]["Statement"]
    assert tls["Effect"] == "Deny" and tls["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_nothing_grants_quicksight_access_to_the_artifacts_bucket(template):
    """Given the template and DEPLOY.md's QuickSight steps
    When every policy statement naming QuickSight, and the steps, are read
    Then none names the artifacts bucket, and the steps give write access to the results bucket only."""
    statements = [
        node
        for resource in template["Resources"].values()
        for node in _walk(resource)
        if isinstance(node, dict) and "Effect" in node and ("Action" in node or "NotAction" in node)
    ]
    quicksight = [s for s in statements if "quicksight" in json.dumps(s).lower()]
    deploy = (REPO / "docs" / "DEPLOY.md").read_text(encoding="utf-8")
    section = deploy.split("## BI on AWS: Athena and QuickSight", 1)[1].split("\n## ", 1)[0]
    step = re.search(r"\n1\. \*Manage QuickSight.*?(?=\n\d\. )", section, re.S)

    assert statements, "the template's policy statements were not found"
    assert all("ArtifactsBucket" not in json.dumps(s) for s in quicksight)
    assert step is not None
    assert "write permission for Athena Workgroup, the results" in " ".join(step.group(0).split())
    assert "<env>-athena-results-" in step.group(0)
    assert re.search(r"no access to the artifacts bucket", step.group(0))
