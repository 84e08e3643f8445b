"""Create `.venv-localstack` (Python 3.13) with LocalStack and our plugin package. Idempotent.

Usage: python -m localaws.setup_venv [--force]

LocalStack 2026.3 needs Python 3.13 while the project runs on 3.11, so it lives in its own venv. A stamp file
holds a hash of what was installed; when nothing changed the script returns in milliseconds.
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
VENV_DIR = Path(os.environ.get("LOCALAWS_VENV", REPO_ROOT / ".venv-localstack"))
PLUGIN_DIR = REPO_ROOT / "localaws" / "plugin"
# The contracts the plugins share with the Lambdas and the Spark jobs (the local DMS names its files by them).
CONTRACTS_DIR = REPO_ROOT / "functions" / "shared"
STAMP = VENV_DIR / ".localaws-installed"

# Later releases of these three break localstack-core 2026.3.0 (measured).
REQUIREMENTS = [
    "localstack-core[runtime]==2026.3.0",
    "cbor2<6",
    "pyopenssl<26",
    "localstack-twisted<26",
    "pyarrow==26.0.1",  # the local DMS's Parquet output (DataFormat=parquet); the same as the project's venv
    "psycopg[binary]>=3.2,<4",  # the local DMS reads a PostgreSQL source through a replication slot
    "mysql-replication>=1.0.17,<2",  # the local DMS reads a MySQL/MariaDB source's binlog
]


def find_python313() -> str:
    """A working python3.13: $LOCALAWS_PYTHON, python3.13 on PATH (if it runs), or a pyenv install."""
    candidates = [os.environ.get("LOCALAWS_PYTHON", ""), shutil.which("python3.13") or ""]
    pyenv_root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates += sorted(glob.glob(f"{pyenv_root}/versions/3.13*/bin/python3.13"), reverse=True)
    candidates += ["/usr/bin/python3.13", "/usr/local/bin/python3.13"]
    for candidate in filter(None, candidates):
        probe = subprocess.run(
            [candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 13))"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() == "True":
            return candidate
    raise SystemExit("python3.13 not found: set LOCALAWS_PYTHON to a Python 3.13 interpreter")


def wanted_state() -> str:
    """Hash of everything that, when changed, needs a reinstall (entry points live in the plugin's pyproject)."""
    digest = hashlib.sha256("\n".join(REQUIREMENTS).encode())
    digest.update((PLUGIN_DIR / "pyproject.toml").read_bytes())
    digest.update(str(CONTRACTS_DIR).encode())
    return digest.hexdigest()


def is_up_to_date() -> bool:
    return (VENV_DIR / "bin" / "python").exists() and STAMP.exists() and STAMP.read_text() == wanted_state()


def install(force: bool = False) -> Path:
    """Make sure the LocalStack venv exists and is current; returns its python."""
    venv_python = VENV_DIR / "bin" / "python"
    if not force and is_up_to_date():
        return venv_python
    if not venv_python.exists():
        subprocess.run([find_python313(), "-m", "venv", str(VENV_DIR)], check=True)
    pip = [str(venv_python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, *REQUIREMENTS], check=True)
    # Editable: code changes in localaws/plugin need no reinstall, only a LocalStack restart.
    subprocess.run([*pip, "--editable", str(PLUGIN_DIR)], check=True)
    site_packages = subprocess.run(
        [str(venv_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site_packages) / "lake_contracts.pth").write_text(
        f"{CONTRACTS_DIR}\n"
    )  # lake_contracts, as the source
    STAMP.write_text(wanted_state())
    return venv_python


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="reinstall even if the stamp says up to date")
    args = parser.parse_args(argv)
    venv_python = install(force=args.force)
    print(f"LocalStack venv ready: {venv_python}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
