"""Glue job: apply quarantined DMS files again once they are fixed (`--file s3://…` or `--run_id`), started by
`lakectl reapply` under the lease of the execution holding it."""

import os
import sys

# local runs: the lakehouse package beside us, the contracts it shares with the Lambdas (on Glue: lakehouse.zip)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "functions", "shared"))

from lakehouse.io.fence import fenced
from lakehouse.jobs.reapply import main

if __name__ == "__main__":
    # fenced: the run commits only while the execution that started it holds the pipeline lease
    sys.exit(fenced(main)(sys.argv[1:]))
