"""The CPU seconds of a command's whole process tree, by process: what a test (or any run) spends, and where
(its pytest, LocalStack, the warm Spark workers' JVMs, `sam`, the Lambda runtimes), sampled once a second
with psutil until the command ends. CPU seconds hold still on a loaded machine where wall seconds do not;
a process that starts and ends between two samples is missed.

    .venv/bin/python bench/process_tree_cpu.py --out tree.json -- .venv/bin/python -m pytest -p no:xdist -q FILE

Prints the command's wall seconds, its tree's CPU seconds and the processes over `--show` CPU seconds;
`--out` keeps every process (CPU seconds, pid, command line).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import psutil  # type: ignore[import-untyped]  # no stubs installed


def tree_cpu(root: psutil.Process, seen: dict[int, list]) -> None:
    """Update `seen` (pid -> [CPU seconds, command line]) with the CPU of `root` and its descendants."""
    try:
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return
    for process in processes:
        try:
            times = process.cpu_times()
            if process.pid not in seen:
                seen[process.pid] = [0.0, " ".join(process.cmdline())[:300]]
            seen[process.pid][0] = times.user + times.system
        except psutil.Error:
            continue


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="every process of the tree, as JSON")
    parser.add_argument("--show", type=float, default=2.0, help="print processes over this many CPU seconds")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    started = time.perf_counter()
    child = subprocess.Popen(command)
    root = psutil.Process(child.pid)
    seen: dict[int, list] = {}
    while child.poll() is None:
        tree_cpu(root, seen)
        time.sleep(1.0)
    wall = time.perf_counter() - started
    rows = sorted(((round(cpu, 2), pid, line) for pid, (cpu, line) in seen.items()), reverse=True)
    print(f"exit {child.returncode}, wall {wall:.1f} s, CPU {sum(r[0] for r in rows):.1f} s")
    for cpu, pid, line in rows:
        if cpu >= args.show:
            print(f"{cpu:8.1f}  {pid:>7}  {line[:120]}")
    if args.out:
        args.out.write_text(
            json.dumps({"command": command, "wall_seconds": round(wall, 1), "processes": rows})
        )
    return child.returncode


if __name__ == "__main__":
    raise SystemExit(main())
