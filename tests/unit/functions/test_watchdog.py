"""The watchdog (moto Step Functions): how many pipeline executions run, published for the alarms."""

from __future__ import annotations

import json

import boto3

from tests.unit.functions.conftest import FakeContext, event


def test_counts_running_executions_of_the_pipeline(aws, load_handler, capsys):
    """Given a state machine with no execution, then one running and one stopped, When the scheduled
    watchdog runs, Then it publishes PipelineExecutionsRunning 0, then 1."""
    role = boto3.client("iam").create_role(RoleName="pipeline", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    definition = {"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "Seconds": 3600, "End": True}}}
    sfn = boto3.client("stepfunctions")
    machine = sfn.create_state_machine(name="dev-pipeline", definition=json.dumps(definition), roleArn=role)
    app = load_handler("watchdog", STATE_MACHINE_ARN=machine["stateMachineArn"])

    assert app.handler(event("watchdog_schedule.json"), FakeContext()) == {"running": 0}
    sfn.start_execution(stateMachineArn=machine["stateMachineArn"], name="running")
    stopped = sfn.start_execution(stateMachineArn=machine["stateMachineArn"], name="stopped")["executionArn"]
    sfn.stop_execution(executionArn=stopped)
    assert app.handler(event("watchdog_schedule.json"), FakeContext()) == {"running": 1}

    published = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert [p["PipelineExecutionsRunning"] for p in published] == [[0.0], [1.0]]
