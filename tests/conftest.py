"""Process-wide test set-up.

`kubernetes` reads $KUBECONFIG when it is imported, so point it at a fixed per-session path
before anything imports it; fixtures rewrite that file for each emulator they start.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

_KUBECONFIG_DIR = Path(tempfile.mkdtemp(prefix="burrito-py-tests-"))
KUBECONFIG_PATH = _KUBECONFIG_DIR / "kubeconfig"
os.environ["KUBECONFIG"] = str(KUBECONFIG_PATH)
