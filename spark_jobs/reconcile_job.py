"""Glue job: compare the clean tables with their source tables (key-range hashes), record and repair divergence."""

import os
import sys

# local runs: the lakehouse package beside us, the contracts it shares with the Lambdas (on Glue: lakehouse.zip)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "functions", "shared"))

from lakehouse.io.fence import fenced
from lakehouse.jobs.reconcile import main

if __name__ == "__main__":
    # fenced: dms_divergence, a reload request and the emptying of a table whose source is empty (its one
    # REPLACE) only while the execution that started it holds the lease
    sys.exit(fenced(main)(sys.argv[1:]))
