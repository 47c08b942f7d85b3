"""The tests of tasks import the example application (examples/tasks_app) as a user would run it: from the
repository's root, which is put on sys.path here."""

from __future__ import annotations

import sys

from helpers.fixtures import REPO_ROOT

if str(REPO_ROOT) not in sys.path:
    sys.path.append(str(REPO_ROOT))
