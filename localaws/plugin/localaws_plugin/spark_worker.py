"""A warm Spark worker: one long-lived host Python with a running Spark JVM that runs job scripts one after
another, as `python script.py args…` would, without paying for a new Python, a new JVM and a cold JIT each
time (≈ 11 s a run). Started by `host_runs.WarmPool`; run as a script with the project's Python:

    python spark_worker.py --library <folder holding the lakehouse package> [--idle-seconds N]

Protocol: one JSON request a line on stdin ({"script", "argv", "cwd", "env", "python_path", "stdout",
"stderr"}), one JSON answer a line on the stdout it was started with ({"returncode": n}); EOF on stdin (the
local AWS went away) or `--idle-seconds` without a request ends the worker, and its JVM with it.

Each run gets what a fresh process would: its environment, argv, working directory and sys.path (the script's
folder, then its python path); its stdout and stderr (file descriptors 1 and 2) into its own files; the
script as `__main__` in a fresh namespace (runpy), `sys.exit` and an uncaught exception turned into the exit
status a process would have. Afterwards the Spark session it made is stopped (the next run gets a new
SparkContext in the same JVM: its own settings, catalogs and caches), the modules it imported from outside
the installed packages (the job's library, e.g. lakehouse.zip) are forgotten, the threads it started are
waited for, and the environment, sys.path and logging handlers are put back.

Stopping or timing out a run kills the worker's process group (the worker and its JVM), exactly as a script
run in its own process was killed; the pool starts a new worker for later runs.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import re
import runpy
import select
import sys
import sysconfig
import tempfile
import threading
import time
import traceback
from typing import Any

THREAD_GRACE_SECONDS = 30.0
# A worker lives long and idles between runs: G1 collects every 30 s when idle and gives back what it freed above
# the heap's floor (heap_options), not the heap its biggest run grew (a run's own JVM ended with it).
IDLE_HEAP_OPTIONS = (
    "-XX:+UseG1GC -XX:G1PeriodicGCInterval=30000 -XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=30"
)
# The heap's floor (-Xms). A heap given back down to what an idle worker holds started every run with a young
# generation of a few MB: a run collected every second or so, G1 ran a concurrent cycle every other run, and a
# full GC after each run gave the heap back again. With a floor of 1 GB and no full GC after a run, a CDC run of
# the pipeline tests' six tables costs 12.3 CPU-s instead of 14.3 (eleven runs: young collections 247 -> 79,
# concurrent cycles 58 -> 4, full 11 -> 0); the idle worker's JVM holds 1.5 GB instead of 0.74
# (bench/warm_worker_runs.py; bench/RESULTS.md, "A warm worker's heap").
HEAP_FLOOR_MB = 1024
_MEMORY = re.compile(r"(\d+)([kmgt]?)b?")  # Spark's sizes: 4g, 4gb, 512m, 2048 (MB)
_MEGABYTES = {"k": 1 / 1024, "": 1, "m": 1, "g": 1024, "t": 1024 * 1024}


def heap_options(driver_memory: str) -> str:
    """The worker JVM's heap options for `driver_memory` (spark.driver.memory, its maximum heap):
    IDLE_HEAP_OPTIONS and a floor of HEAP_FLOOR_MB, or of the maximum heap where that is less (a floor above it
    would stop the JVM). A size Spark would refuse gets no floor: Spark says what is wrong with it."""
    size = _MEMORY.fullmatch(driver_memory.strip().lower())
    floor = min(HEAP_FLOOR_MB, int(int(size[1]) * _MEGABYTES[size[2]])) if size else 0
    return f"{IDLE_HEAP_OPTIONS} -Xms{floor}m" if floor else IDLE_HEAP_OPTIONS


def launch_jvm(library: str, warm_up: bool = True) -> None:
    """Start the Spark JVM with the settings a local job session asks for at launch (jars, driver memory, JVM
    options: lakehouse.io.session's), then (`warm_up`) warm it: a session writes, merges into and reads an
    Iceberg table in a scratch warehouse, so the classes are loaded and the hot paths compiled before the
    first run."""
    sys.path.insert(0, library)
    try:
        from lakehouse.base.config import LakeConfig
        from lakehouse.io.session import LOCAL_JAVA_OPTIONS, build_session, local_jar_settings
        from pyspark import SparkConf, SparkContext

        conf = SparkConf(loadDefaults=False)
        conf.setAll(list(local_jar_settings(os.environ.get("LAKE_SPARK_MASTER", "local[2]")).items()))
        driver_memory = os.environ.get("LAKE_SPARK_DRIVER_MEMORY", "4g")
        conf.set("spark.driver.memory", driver_memory)
        conf.set(
            "spark.driver.extraJavaOptions",
            f"{os.environ.get('LAKE_SPARK_JAVA_OPTIONS', LOCAL_JAVA_OPTIONS)} {heap_options(driver_memory)}".strip(),
        )
        SparkContext._ensure_initialized(conf=conf)  # the JVM only: no context, nothing else in its defaults
        if not warm_up:
            return
        with tempfile.TemporaryDirectory(prefix="spark-worker-warm-up-") as scratch:
            spark = build_session(LakeConfig(catalog_name="warm_up", warehouse=scratch), "warm-up")
            try:
                spark.sql("CREATE TABLE warm_up.db.t (id BIGINT, v STRING) USING iceberg")
                spark.sql("INSERT INTO warm_up.db.t VALUES (1, 'a'), (2, 'b')")
                spark.createDataFrame([(2, "c"), (3, "d")], "id BIGINT, v STRING").createOrReplaceTempView(
                    "c"
                )
                spark.sql(
                    "MERGE INTO warm_up.db.t t USING c ON t.id = c.id WHEN MATCHED THEN UPDATE SET * "
                    "WHEN NOT MATCHED THEN INSERT *"
                )
                spark.table("warm_up.db.t").collect()
            finally:
                spark.stop()
                jvm = SparkContext._jvm
                assert jvm is not None  # the gateway started above
                jvm.java.lang.System.gc()
    finally:
        sys.path.remove(library)
        forget_modules(_library_modules(library))


def share_service_models() -> None:
    """Every run's boto3 gets a new default session (run_one: the run's credentials and region), and every new
    botocore session read AWS's service models again, megabytes of JSON for a run's first S3 client (a CDC run's
    manifest): one loader keeps them for the worker's life. They are data files of the installed botocore,
    the same for every run."""
    try:
        import botocore.loaders
        import botocore.session
    except ImportError:  # a Python without boto3: its runs make no AWS clients either
        return
    if botocore.session.create_loader is botocore.loaders.create_loader:  # not shared yet
        botocore.session.create_loader = functools.cache(botocore.loaders.create_loader)


def _library_modules(library: str) -> list[str]:
    prefix = os.path.join(os.path.abspath(library), "")
    return [name for name, module in list(sys.modules.items()) if _file_of(module).startswith(prefix)]


def _file_of(module: Any) -> str:
    return (
        os.path.abspath(getattr(module, "__file__", None) or "") if getattr(module, "__file__", None) else ""
    )


def installed_prefixes() -> tuple[str, ...]:
    """Where the interpreter's own and installed modules live: those stay imported between runs."""
    paths = sysconfig.get_paths()
    found = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    return tuple(os.path.join(os.path.abspath(path), "") for path in found)


def modules_of_run(before: set[str], prefixes: tuple[str, ...]) -> list[str]:
    """Modules a run imported that are not installed packages (its script, its library): forgotten after it."""
    names = []
    for name in set(sys.modules) - before:
        path = _file_of(sys.modules.get(name))
        if not path or not path.startswith(prefixes):
            names.append(name)
    return names


def forget_modules(names: list[str]) -> None:
    import importlib

    for name in names:
        sys.modules.pop(name, None)
    importlib.invalidate_caches()


def exit_status(code: Any) -> int:
    """The exit status of a process that called sys.exit(code)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def stop_spark() -> None:
    """Stop the run's session and context, if it made one: the next run starts from a new SparkContext. No full
    GC: the idle worker's periodic collections give the heap back (IDLE_HEAP_OPTIONS, heap_options)."""
    if "pyspark" not in sys.modules:
        return
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    session = SparkSession._instantiatedSession
    if session is not None:
        session.stop()
    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()


def run_one(request: dict[str, Any], base_path: list[str], prefixes: tuple[str, ...]) -> int:
    script = os.path.abspath(request["script"])
    saved_environ = dict(os.environ)
    saved_argv, saved_cwd = list(sys.argv), os.getcwd()
    saved_handlers = list(logging.root.handlers)
    saved_level = logging.root.level
    threads_before = set(threading.enumerate())
    modules_before = set(sys.modules)
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fds = os.dup(1), os.dup(2)
    out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.close(out)
    os.close(err)
    returncode = 0
    try:
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path[:] = [os.path.dirname(script), *request.get("python_path", []), *base_path]
        sys.argv = [script, *request.get("argv", [])]
        os.chdir(request["cwd"])
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as exit_:
            returncode = exit_status(exit_.code)
        except BaseException:
            traceback.print_exc()
            returncode = 1
        # A process waits for its threads before it exits; a pool's idle workers never end by themselves.
        deadline = time.monotonic() + THREAD_GRACE_SECONDS
        for thread in set(threading.enumerate()) - threads_before:
            if not thread.daemon:
                thread.join(max(0.0, deadline - time.monotonic()))
    finally:
        try:
            stop_spark()
        except Exception:
            traceback.print_exc()
            returncode = returncode or 1
        if "boto3" in sys.modules:  # its default session keeps the credentials and region it first read
            boto3_module: Any = sys.modules["boto3"]
            boto3_module.DEFAULT_SESSION = None
        for handler in set(logging.root.handlers) - set(saved_handlers):
            logging.root.removeHandler(handler)
        logging.root.setLevel(saved_level)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved_fds[0], 1)
        os.dup2(saved_fds[1], 2)
        os.close(saved_fds[0])
        os.close(saved_fds[1])
        os.environ.clear()
        os.environ.update(saved_environ)
        sys.path[:] = base_path
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        forget_modules(modules_of_run(modules_before, prefixes))
    return returncode


def jvm_alive() -> bool:
    """Whether the worker's JVM still runs (the OOM killer may have taken it: the worker must not serve on)."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    process = getattr(gateway, "proc", None)
    return gateway is not None and (process is None or process.poll() is None)


def serve(requests: Any, answers: Any, idle_seconds: float, check_seconds: float = 5.0) -> int:
    """Serve runs until EOF (0), `idle_seconds` without one (0), or the JVM died (3: the pool replaces it)."""
    base_path = list(sys.path)
    prefixes = installed_prefixes()
    idle_since = time.monotonic()
    while True:
        if not jvm_alive():
            return 3
        ready, _, _ = select.select([requests], [], [], check_seconds)
        if not ready:
            if time.monotonic() - idle_since >= idle_seconds:
                return 0  # idle too long: the pool starts another when it needs one
            continue
        line = requests.readline()
        if not line:
            return 0  # the local AWS is gone
        returncode = run_one(json.loads(line), base_path, prefixes)
        answers.write(json.dumps({"returncode": returncode}) + "\n")
        answers.flush()
        idle_since = time.monotonic()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", required=True, help="the folder holding the lakehouse package (warm-up)")
    parser.add_argument("--idle-seconds", type=float, default=900.0)
    parser.add_argument("--no-warm-up", action="store_true", help="start the JVM, run nothing in it")
    args = parser.parse_args(argv)
    # The protocol keeps the descriptors the worker was started with; 0 becomes /dev/null (a job reads no
    # stdin) and 1 joins 2 (the worker's log), which the JVM inherits.
    requests = os.fdopen(os.dup(0), "r")
    answers = os.fdopen(os.dup(1), "w")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    sys.path[:] = [
        p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))
    ]
    launch_jvm(args.library, warm_up=not args.no_warm_up)
    share_service_models()
    answers.write(json.dumps({"ready": True}) + "\n")
    answers.flush()
    return serve(requests, answers, args.idle_seconds)


if __name__ == "__main__":
    sys.exit(main())
