"""The pipeline lease, seen from a job run: every commit of a run is fenced by the lease it was started under.

The state machine starts every Glue/EMR run with the lease object's URI (`--lease_uri`), the execution that
held the lease when it started the run (`--lease_holder`) and the lease's epoch then (`--lease_epoch`, a
counter the lease function increments at every acquisition that changes the holder). Right before each
commit, the run reads the lease object: if it names another holder, or another epoch, the execution that
started the run lost the lease (it was stopped, and another took over) and the run must write nothing more:
`LeaseLostError`, the job exits non-zero. Every fenced commit records the holder and the epoch in its
snapshot summary (`dms.lease-holder`, `dms.lease-epoch`).

A check leaves the window of the commit's own duration; the other side closes it: an execution taking the
lease over stops the old holder's runs that are still going and waits until they stopped before it starts
its own (functions/lease). A run started without `--lease_uri` (local CLI runs, tests) is unfenced.

The job entry installs one fence for the whole run (`install`); the commit functions consult it
(`check_before_commit`), so the pure functions keep their signatures.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lakehouse.io.storage import is_missing, read_bytes

log = logging.getLogger(__name__)

LEASE_EPOCH = "dms.lease-epoch"  # snapshot summary: the lease epoch the committing run was started under
LEASE_HOLDER = "dms.lease-holder"  # snapshot summary: the execution that held the lease then


class LeaseLostError(RuntimeError):
    """The execution that started this run no longer holds the pipeline lease: nothing may be committed."""


@dataclass
class LeaseFence:
    lease_uri: str
    holder: str
    epoch: int | None = None
    endpoint_url: str | None = None
    _lost: LeaseLostError | None = field(default=None, repr=False)

    def check(self) -> None:
        """Raise LeaseLostError unless the lease still names this run's holder and epoch. Once lost, always
        lost (a lease never comes back to an old epoch)."""
        if self._lost is not None:
            raise self._lost
        try:
            body = read_bytes(self.lease_uri, self.endpoint_url)
        except Exception as error:
            if not is_missing(error):
                raise  # can't tell: fail closed, this commit does not happen (the batch stays pending)
            body = b"{}"
        document = _lease_document(body)
        if document is None:  # fail closed, naming the object: nobody provably holds the lease
            raise LeaseLostError(
                f"LeaseLost: the pipeline lease {self.lease_uri} is corrupt (not a JSON object): {body[:200]!r}; "
                "this run commits nothing (its batch stays pending)"
            )
        holder = str(document.get("holder") or "")
        epoch = document.get("epoch")
        if holder == self.holder and (self.epoch is None or (_as_int(epoch) or 0) == self.epoch):
            return
        now = (
            f"is held by {holder} (epoch {epoch}) since {document.get('acquired_at', '?')}"
            if holder
            else "does not exist any more"
        )
        self._lost = LeaseLostError(
            f"LeaseLost: this run was started under the pipeline lease of {self.holder} (epoch {self.epoch}), "
            f"but the lease {self.lease_uri} {now}: the run commits nothing (its batch stays pending for the "
            "execution that holds the lease)"
        )
        raise self._lost

    def summary(self) -> dict[str, str]:
        found = {LEASE_HOLDER: self.holder}
        if self.epoch is not None:
            found[LEASE_EPOCH] = str(self.epoch)
        return found


def _lease_document(body: bytes) -> dict[str, Any] | None:
    """The lease object's document, or None when it is not a JSON object (corrupt)."""
    try:
        document = json.loads(body)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


def _as_int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


_installed: LeaseFence | None = None
_unfenced_logged = False
_lock = threading.Lock()


def install(fence: LeaseFence | None) -> None:
    """The fence of this process's run (None: unfenced)."""
    global _installed, _unfenced_logged
    with _lock:
        _installed = fence
        _unfenced_logged = False


def installed() -> LeaseFence | None:
    return _installed


def check_before_commit() -> dict[str, str]:
    """Check the run's fence right before a commit; the snapshot summary properties the commit records
    ({} when unfenced)."""
    global _unfenced_logged
    fence = _installed
    if fence is None:
        with _lock:
            if not _unfenced_logged:
                _unfenced_logged = True
                log.info(
                    "no --lease_uri: this run is not fenced by the pipeline lease (a local or manual run)"
                )
        return {}
    fence.check()
    return fence.summary()


def lease_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument(
        "--lease_uri", default="", help="the pipeline lease object (set by the state machine)"
    )
    parser.add_argument("--lease_holder", default="", help="the execution that held the lease at the start")
    parser.add_argument("--lease_epoch", default="", help="the lease's epoch at the start")
    parser.add_argument("--s3_endpoint_url", default=None)
    return parser


def fence_from_arguments(argv: Sequence[str]) -> tuple[LeaseFence | None, list[str]]:
    """The fence the run's arguments describe, and the arguments without the lease ones."""
    args, _ = lease_parser().parse_known_args(list(argv))
    rest: list[str] = []
    items = list(argv)
    skip = False
    for i, item in enumerate(items):
        if skip:
            skip = False
            continue
        name = item.split("=", 1)[0]
        if name in ("--lease_uri", "--lease_holder", "--lease_epoch"):
            skip = "=" not in item and i + 1 < len(items)
            continue
        rest.append(item)
    if not args.lease_uri:
        return None, rest
    if not args.lease_holder:
        raise SystemExit("--lease_uri needs --lease_holder (the execution the run was started under)")
    epoch = _as_int(args.lease_epoch) if args.lease_epoch else None
    if args.lease_epoch and epoch is None:
        raise SystemExit(f"--lease_epoch {args.lease_epoch!r} is not an integer")
    return LeaseFence(args.lease_uri, args.lease_holder, epoch, args.s3_endpoint_url), rest


def fenced(main: Callable[[Sequence[str]], int]) -> Callable[[Sequence[str]], int]:
    """A job entry that installs the fence its arguments describe; a lost lease exits 1 with its message."""

    def run(argv: Sequence[str]) -> int:
        fence, rest = fence_from_arguments(argv)
        install(fence)
        try:
            if fence is not None:
                fence.check()  # a run started after its execution lost the lease does nothing at all
                log.info(
                    "fenced by the lease %s: holder %s, epoch %s", fence.lease_uri, fence.holder, fence.epoch
                )
            code = main(rest)
        except LeaseLostError as error:
            raise SystemExit(str(error)) from None
        lost = fence._lost if fence is not None else None
        if lost is not None:  # a commit refused, whatever the job made of it: the run did not succeed
            raise SystemExit(str(lost))
        return code

    run.__name__ = getattr(main, "__name__", "main")
    run.__doc__ = main.__doc__
    return run
