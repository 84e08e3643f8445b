"""Create `.venv-sam` (Python 3.11) with the AWS SAM CLI. Idempotent.

Usage: python -m localaws.setup_sam [--force]

The SAM CLI pins many libraries (boto3, cfn-lint, …) that would fight the project's own venv, so it lives
in its own. A stamp file holds a hash of what was installed; when nothing changed this returns in
milliseconds. Use it as `.venv-sam/bin/sam`.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
VENV_DIR = Path(os.environ.get("LOCALAWS_SAM_VENV", REPO_ROOT / ".venv-sam"))
STAMP = VENV_DIR / ".localaws-installed"
REQUIREMENTS = ["aws-sam-cli>=1.120,<2"]


def sam_executable() -> Path:
    return VENV_DIR / "bin" / "sam"


def find_python311() -> str:
    """A working python3.11 (what `sam build` needs for python3.11 functions without a container)."""
    candidates = [os.environ.get("LOCALAWS_SAM_PYTHON", ""), sys.executable, shutil.which("python3.11") or ""]
    pyenv_root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates += sorted(glob.glob(f"{pyenv_root}/versions/3.11*/bin/python3.11"), reverse=True)
    for candidate in filter(None, candidates):
        probe = subprocess.run(
            [candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 11))"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() == "True":
            return candidate
    raise SystemExit("python3.11 not found: set LOCALAWS_SAM_PYTHON to a Python 3.11 interpreter")


def wanted_state() -> str:
    return hashlib.sha256("\n".join(REQUIREMENTS).encode()).hexdigest()


def is_up_to_date() -> bool:
    return sam_executable().exists() and STAMP.exists() and STAMP.read_text() == wanted_state()


def install(force: bool = False) -> Path:
    """Make sure `.venv-sam` exists and is current; returns the `sam` executable."""
    if not force and is_up_to_date():
        return sam_executable()
    venv_python = VENV_DIR / "bin" / "python"
    if not venv_python.exists():
        subprocess.run([find_python311(), "-m", "venv", str(VENV_DIR)], check=True)
    pip = [str(venv_python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, *REQUIREMENTS], check=True)
    STAMP.write_text(wanted_state())
    return sam_executable()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="reinstall even if the stamp says up to date")
    args = parser.parse_args(argv)
    print(f"SAM CLI ready: {install(force=args.force)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
