import sys
from pathlib import Path

# The plugin package is installed in LocalStack's venv; its pure modules are imported from the tree here.
PLUGIN_DIR = Path(__file__).resolve().parents[3] / "localaws" / "plugin"
if str(PLUGIN_DIR) not in sys.path:
    sys.path.insert(0, str(PLUGIN_DIR))
