"""Shell completion (pgjobq completion SHELL) and the documented exit codes of the command line.

bash runs the completion for real; the other scripts and the help are read in-process (click's runner).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from pgjobq._cli import main


def test_bash_completes_the_commands_and_options_once_the_script_is_loaded() -> None:
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed here")
    script = """
        eval "$(pgjobq completion bash)"
        COMP_WORDS=(pgjobq jo); COMP_CWORD=1
        _pgjobq_completion pgjobq; echo "commands: ${COMPREPLY[*]}"
        COMPREPLY=(); COMP_WORDS=(pgjobq jobs list --st); COMP_CWORD=3
        _pgjobq_completion pgjobq; echo "options: ${COMPREPLY[*]}"
    """
    # the installed console script, as a user's shell finds it
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    result = subprocess.run(
        ["bash", "--norc", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": path},
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["commands: job jobs", "options: --status"]


@pytest.mark.parametrize(
    ("shell", "marker"), [("zsh", "#compdef pgjobq"), ("fish", "complete --no-files --command pgjobq")]
)
def test_completion_prints_clicks_script_for_zsh_and_fish(shell: str, marker: str) -> None:
    result = CliRunner().invoke(main, ["completion", shell])

    assert result.exit_code == 0, result.output
    assert marker in result.output
    assert "_PGJOBQ_COMPLETE" in result.output


def test_help_documents_the_exit_codes() -> None:
    result = CliRunner().invoke(main, ["--help"])

    assert result.exit_code == 0
    codes = result.output.split("Exit codes:")[1]
    assert [words[0] for words in map(str.split, codes.splitlines()) if words and words[0].isdigit()] == [
        "0", "1", "2", "3",
    ]  # fmt: skip
