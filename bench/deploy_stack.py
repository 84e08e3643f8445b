"""What a pipeline test's stack costs before its first change: `sam build`, `sam package` once, then `sam deploy`
of N stacks of the packaged template into a local AWS of its own, each timed, and the disk the local AWS then holds
unzipped (every Lambda function and layer version it deployed: LocalStack keeps them until it stops).

    .venv/bin/python bench/deploy_stack.py --stacks 4 --port 4900

Writes bench/results/deploy-stack-<UTC time>.json and prints it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(ROOT)]

from localaws import sam_app  # noqa: E402
from localaws.stack import StackConfig, running_stack  # noqa: E402

# The stacks never run: a task ARN of the right shape is all the template needs (no DMS task is created).
TASK_ARN = "arn:aws:dms:us-east-1:000000000000:task:DEPLOYBENCH"


def folder_mb(folder: Path) -> int:
    files = (path for path in folder.rglob("*") if path.is_file() and not path.is_symlink())
    return round(sum(path.stat().st_size for path in files) / 2**20)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stacks", type=int, default=4)
    parser.add_argument("--port", type=int, default=4900, help="the bench's own local AWS (not the tests')")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="deploy-stack-"))
    config = StackConfig(port=args.port, state_dir=work / "localstack")
    try:
        with running_stack(config) as endpoint:
            started = time.monotonic()
            sam_app.build(endpoint)
            build_seconds = time.monotonic() - started
            started = time.monotonic()
            packaged = sam_app.package(endpoint, work / "packaged.yaml")
            package_seconds = time.monotonic() - started
            deploys = []
            for number in range(args.stacks):
                name = f"bench{number}{uuid.uuid4().hex[:4]}"
                started = time.monotonic()
                sam_app.deploy(
                    endpoint,
                    name,
                    {"EnvironmentName": name, "DmsReplicationTaskArn": TASK_ARN},
                    template=packaged,
                )
                deploys.append(round(time.monotonic() - started, 1))
            result = {
                "command": f"bench/deploy_stack.py --stacks {args.stacks} --port {args.port}",
                "at": datetime.now(UTC).isoformat(timespec="seconds"),
                "build_seconds": round(build_seconds, 1),
                "build_mb": folder_mb(sam_app.build_dir(endpoint)),
                "package_seconds": round(package_seconds, 1),
                "deploy_seconds": deploys,
                "unzipped_mb": folder_mb(config.tmp_dir),
            }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = BENCH / "results" / f"deploy-stack-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
