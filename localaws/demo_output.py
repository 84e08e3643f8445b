"""What the demo (`python -m localaws.demo`) prints while it runs: a line per step, timed from the demo's
start, and a progress line every few seconds from a thread of its own (`localaws.progress`)."""

from __future__ import annotations

import threading
import time

from localaws.progress import ProgressMonitor


class ProgressPrinter(threading.Thread):
    """Prints one progress line every `every` seconds until stopped."""

    def __init__(self, monitor: ProgressMonitor, every: float) -> None:
        super().__init__(name="progress", daemon=True)
        self.monitor = monitor
        self.every = every
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            try:
                print(self.monitor.snapshot().line(), flush=True)
            except Exception as error:  # progress is best effort; the run itself reports failures
                print(f"(progress unavailable: {type(error).__name__}: {error})", flush=True)


def step(started: float, text: str) -> None:
    """One step's line: `text` after the seconds since `started` (a `time.monotonic()`)."""
    print(f"[{time.monotonic() - started:6.0f}s] {text}", flush=True)
