"""Runs the python blocks of one documentation page in a clean interpreter (started by runner.py).

    python pydriver.py REQUESTS_FD REPLIES_FD CAPTURE_DIR

The current directory is the page's folder (on sys.path).  Each request is one JSON line on REQUESTS_FD:
``{"code": ..., "path": ..., "line": N}``.  The code runs in the page's one namespace (``dsn`` set from
PGJOBQ_DSN, ``__name__ == "__main__"``), compiled under the page's path with its line numbers, so that a
traceback names the page's file and line.  While it runs, file descriptors 1 and 2 go to a capture file,
so what the block and the processes it starts print (stdout and stderr, as a terminal would show them) is
caught; the reply is one JSON line on REPLIES_FD: ``{"output": ..., "error": traceback or null}``.  The
driver ends when REQUESTS_FD closes.  Standard library only.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

__all__ = ["main", "run_block"]


def run_block(namespace: dict[str, Any], code: str, path: str, line: int) -> str | None:
    """Run code (the block whose first line is line of path) in namespace; the traceback if it raised."""
    try:
        compiled = compile("\n" * (line - 1) + code, path, "exec")
        exec(compiled, namespace)
    except BaseException as exc:
        shown = traceback.TracebackException.from_exception(exc)
        # leave out this driver's own frames: the first frame is the block's
        while shown.stack and shown.stack[0].filename == __file__:
            shown.stack.pop(0)
        return "".join(shown.format())
    return None


def main() -> None:
    """Answer the requests of REQUESTS_FD until it closes (see the module docstring)."""
    requests_fd, replies_fd, capture_dir = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    # the page's folder first, and this driver's own (tests/docs) out: the page imports nothing from there
    here = {str(Path(__file__).parent), str(Path(__file__).resolve().parent)}
    sys.path[:] = [os.getcwd(), *(entry for entry in sys.path if entry not in here)]
    namespace: dict[str, Any] = {
        "__name__": "__main__",
        "__builtins__": __builtins__,
        "dsn": os.environ["PGJOBQ_DSN"],
    }
    with os.fdopen(requests_fd, "r", encoding="utf-8") as requests, os.fdopen(replies_fd, "w") as replies:
        for number, request_line in enumerate(requests):
            request = json.loads(request_line)
            capture = capture_dir / f"block-{number}.out"
            sys.stdout.flush()
            sys.stderr.flush()
            saved = os.dup(1), os.dup(2)
            with capture.open("wb") as out:
                os.dup2(out.fileno(), 1)
                os.dup2(out.fileno(), 2)
            try:
                error = run_block(namespace, request["code"], request["path"], request["line"])
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
                os.close(saved[0])
                os.close(saved[1])
            output = capture.read_text(encoding="utf-8", errors="replace")
            replies.write(json.dumps({"output": output, "error": error}) + "\n")
            replies.flush()


if __name__ == "__main__":
    main()
