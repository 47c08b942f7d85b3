"""Sphinx configuration of pgjobq's documentation (make docs: warnings are errors).

MyST reads the Markdown pages; furo is the theme; the reference pages are generated: the SQL reference,
privileges and error codes from the catalog of a throwaway server (_ext/sqlref.py), the Python API from
the docstrings (autodoc) and the CLI from click itself (sphinx-click).
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
# the extensions of _ext, and the tests' helpers that sqlref.py starts its server with (helpers.working_tree)
sys.path[:0] = [str(DOCS / "_ext"), str(DOCS.parent / "tests")]

project = "pgjobq"
author = "the pgjobq developers"
copyright = "the pgjobq developers, under the PostgreSQL License"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx_click",
    "sqlref",
    "clickref",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "README.md"]
myst_enable_extensions = ["colon_fence", "deflist", "fieldlist"]
myst_heading_anchors = 3

html_theme = "furo"
html_title = "pgjobq"
html_static_path: list[str] = []

# An ```sql block is a psql session (statements and their output, run and compared by tests/docs): the SQL
# lexer cannot read the output's tables (a JSON value, a `\set` line), and a highlighting failure is not
# a fault of the page. Everything else warns, and -W makes each warning an error.
suppress_warnings = ["misc.highlighting_failure"]

# Every cross-reference must resolve: a broken link is a warning (an error under make docs' -W).
nitpicky = True

# The Python reference (docs/reference/python.md): the public names of each module (its __all__), in
# groups (classes, exceptions, functions), signatures with their type hints.
autodoc_default_options = {"members": True, "member-order": "groupwise"}
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
# Under -n (nitpicky), type hints naming other projects' classes (no intersphinx: the build is offline),
# pgjobq's private helpers and type variables are not link targets.
nitpick_ignore_regex = [
    (
        r"py:.*",
        r"(collections\.abc|datetime|typing|threading|contextlib|inspect|psycopg|psycopg_pool|sqlalchemy"
        r"|fastapi|starlette|django|prometheus_client)(\..*)?",
    ),
    (r"py:.*", r"pgjobq\.(.*\.)?_.*"),  # private modules and names
    (r"py:.*", r"(.*\.)?[A-Z]"),  # type variables: P, R, pgjobq.contrib.django.R
    (r"py:class", r"AsyncSession|AsyncConnection"),  # annotations under TYPE_CHECKING, unresolvable
]
