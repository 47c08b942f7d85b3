"""make fresh-check runs the README's first commands in a pristine Debian root: which commands it reads.

The check itself (debootstrap, a clone, the commands) takes minutes and root: it is a target of its own,
run before closing any change to the setup, not a test.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from helpers.fixtures import REPO_ROOT


def commands(top: Path) -> list[str]:
    result = subprocess.run(
        [str(top / "tools" / "fresh-check"), "--commands"], capture_output=True, text=True, check=True
    )
    return result.stdout.splitlines()


def test_the_readme_opens_with_the_two_commands_the_check_runs() -> None:
    assert commands(REPO_ROOT) == ["make demo", "make test"]


def test_the_commands_are_the_first_sh_block_without_its_comments(tmp_path: Path) -> None:
    (tmp_path / "tools").mkdir()
    shutil.copy(REPO_ROOT / "tools" / "fresh-check", tmp_path / "tools" / "fresh-check")
    (tmp_path / "README.md").write_text(
        "# a project\n\n```sql\nSELECT 1;\n```\n\n"
        "```sh\nmake demo   # what it does\n            # and more of it\n\nmake  test\n```\n\n"
        "```sh\nmake chaos\n```\n"
    )

    assert commands(tmp_path) == ["make demo", "make  test"]
