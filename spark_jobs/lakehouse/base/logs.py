"""How a job process logs (every entry point calls `configure_logging` first): INFO and up to stderr, which
Glue and EMR Serverless keep as the driver's log; py4j's chatter only from WARNING."""

from __future__ import annotations

import logging
import sys


def configure_logging() -> None:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)
