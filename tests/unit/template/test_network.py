"""The network the jobs need to reach a source in a VPC: the reconcile's Glue connection (SSL on by default,
the job role's EC2 and connection grants only with it) and EMR Serverless in the source's subnets."""

from __future__ import annotations

from pathlib import Path

from tests.unit.template.test_reconcile_wiring import _statements

REPO = Path(__file__).resolve().parents[3]


def test_the_reconcile_connection_requires_ssl_unless_told_otherwise(template):
    properties = template["Resources"]["ReconcileSourceConnection"]["Properties"]["ConnectionInput"]
    assert properties["ConnectionProperties"]["JDBC_ENFORCE_SSL"] == {"Ref": "ReconcileJdbcEnforceSsl"}
    parameter = template["Parameters"]["ReconcileJdbcEnforceSsl"]
    assert parameter["Default"] == "true" and parameter["AllowedValues"] == ["true", "false"]


def test_the_glue_role_may_read_its_connection_and_make_network_interfaces_only_with_one(template):
    """Given the Glue job role, Then glue:GetConnection on exactly the reconcile's connection, the EC2 lookups
    and the network interfaces Glue makes in the connection's subnet are granted under HasSourceConnection
    only (a stack without a VPC source gets no EC2 permission at all)."""
    statements = _statements(template, "GlueJobRole")
    network = {sid: s for sid, s in statements.items() if sid.startswith("Reconcile") and "_condition" in s}
    connection = network["ReconcileReadsItsConnection"]
    assert connection["Action"] == "glue:GetConnection"
    assert any(
        "connection/${EnvironmentName}-reconcile-source" in r["Fn::Sub"] for r in connection["Resource"]
    )
    name = template["Resources"]["ReconcileSourceConnection"]["Properties"]["ConnectionInput"]["Name"]
    assert name == {"Fn::Sub": "${EnvironmentName}-reconcile-source"}
    interfaces = network["ReconcileNetworkInterfaces"]
    assert set(interfaces["Action"]) == {"ec2:CreateNetworkInterface", "ec2:DeleteNetworkInterface"}
    assert any("subnet/${ReconcileSubnetId}" in r["Fn::Sub"] for r in interfaces["Resource"])
    lookups = set(network["ReconcileLooksUpItsNetwork"]["Action"])
    assert {"ec2:DescribeSubnets", "ec2:DescribeSecurityGroups", "ec2:DescribeVpcEndpoints"} <= lookups
    ec2 = [sid for sid, s in statements.items() if str(s.get("Action", "")).find("ec2:") >= 0]
    assert {statements[sid]["_condition"] for sid in ec2} == {"HasSourceConnection"}
    new = ("ReconcileReadsItsConnection", "ReconcileLooksUpItsNetwork", "ReconcileNetworkInterfaces")
    assert {network[sid]["_condition"] for sid in (*new, "ReconcileTagsItsNetworkInterfaces")} == {
        "HasSourceConnection"
    }


def test_emr_serverless_runs_in_the_given_subnets_and_security_groups(template):
    """Given EmrSubnetIds and EmrSecurityGroupIds, Then the application's network configuration is theirs;
    without them, none (EMR Serverless's own network); subnets without security groups are refused."""
    network = template["Resources"]["EmrApplication"]["Properties"]["NetworkConfiguration"]
    assert network == {
        "Fn::If": [
            "HasEmrNetwork",
            {
                "SubnetIds": {"Fn::Split": [",", {"Ref": "EmrSubnetIds"}]},
                "SecurityGroupIds": {"Fn::Split": [",", {"Ref": "EmrSecurityGroupIds"}]},
            },
            {"Ref": "AWS::NoValue"},
        ]
    }
    assert template["Parameters"]["EmrSubnetIds"]["Default"] == ""
    (assertion,) = template["Rules"]["EmrNetworkNeeds"]["Assertions"]
    assert assertion["Assert"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "EmrSecurityGroupIds"}, ""]}]}


def test_deploy_says_one_thing_about_the_mysql_reconcile():
    """The reconcile has a MySQL source (lakehouse/reconcile/mysql.py): DEPLOY.md never says MySQL is not
    supported."""
    assert (REPO / "spark_jobs" / "lakehouse" / "reconcile" / "mysql.py").is_file()
    deploy = " ".join((REPO / "docs" / "DEPLOY.md").read_text().split())
    assert "(MySQL, SQL Server, Oracle) are not supported yet" not in deploy
    assert "SourceEngine=mysql" in deploy
