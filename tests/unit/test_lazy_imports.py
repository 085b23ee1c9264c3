"""Importing a Lambda handler stays cheap: no module it loads imports jsonschema.

jsonschema (through ``rfc3987_syntax``) costs about 750 ms at import, which every cold start
would pay; only a pipeline with a validate stage needs it, so it is imported where it is used
(``stepcrawl.pipeline.etl_tasks`` and ``stepcrawl.etl.validate``). That a bad schema is still
rejected with the same message is covered by test_models.py and test_loading.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HANDLERS = ("fetch", "parse", "dispatch", "sweeper", "scaler", "notify", "render")

# Run in a fresh interpreter: this test process has long since imported jsonschema.
PROBE = """\
import importlib.util
import sys

spec = importlib.util.spec_from_file_location("handler", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print("jsonschema" in sys.modules)
"""


@pytest.mark.parametrize("function", HANDLERS)
def test_handler_import_does_not_import_jsonschema(function: str) -> None:
    handler = ROOT / "functions" / function / "handler.py"
    assert handler.is_file()
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(handler)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False", f"functions/{function}/handler.py imports jsonschema"
