"""manage.py of the test project (tests/ goes on the path, so frameworks.djangoapp imports)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "frameworks.djangoapp.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
