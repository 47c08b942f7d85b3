"""The integrations stay optional: importing pgjobq (its CLI, pgjobq.contrib) imports no framework."""

from __future__ import annotations

import subprocess
import sys

FRAMEWORKS = ("django", "sqlalchemy", "fastapi", "starlette")


def test_importing_pgjobq_imports_no_framework() -> None:
    script = (
        "import sys, pgjobq, pgjobq.contrib, pgjobq._cli; "
        f"print(' '.join(sorted(name for name in {FRAMEWORKS!r} if name in sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)

    assert done.stdout.strip() == ""
