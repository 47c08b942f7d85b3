"""The configuration reference: every option of every CLI command, its environment variable and default,
read from click's command tree (the same objects ``pgjobq --help`` prints).

Directive ``jobq-cli-configuration``, its one argument the command as ``module:attribute``
(``pgjobq._cli:main``), option ``:prog:`` the name it is run by (``pgjobq``): one section per command
that has options, each with a table.  ``options`` is the walk the directive and the tests share.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import click
from docutils import nodes  # type: ignore[import-untyped]
from docutils.parsers.rst import directives  # type: ignore[import-untyped]
from reftables import table
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util.docutils import SphinxDirective

__all__ = [
    "NOT_SETTINGS",
    "CliConfiguration",
    "CommandOption",
    "commands",
    "default_text",
    "load",
    "options",
    "plain_help",
    "setup",
]

# Options every command has that set nothing: no environment variable is expected for them.
NOT_SETTINGS = frozenset({"help", "version"})


@dataclass(frozen=True)
class CommandOption:
    """One option of one command: the command's full name (``pgjobq jobs list``) and the option."""

    command: str
    option: click.Option
    context: click.Context

    @property
    def flags(self) -> str:
        return ", ".join([*self.option.opts, *self.option.secondary_opts])

    @property
    def envvars(self) -> tuple[str, ...]:
        envvar = self.option.envvar
        if envvar is None:
            return ()
        return (envvar,) if isinstance(envvar, str) else tuple(envvar)


def load(spec: str) -> click.Command:
    """The click command named ``module:attribute``; ExtensionError unless it is one."""
    module_name, _, attribute = spec.partition(":")
    try:
        command = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ExtensionError(f"cannot import the command {spec!r}: {exc}") from exc
    if not isinstance(command, click.Command):
        raise ExtensionError(f"{spec!r} is not a click command, got {type(command).__name__}")
    return command


def commands(
    command: click.Command, prog: str, parent: click.Context | None = None
) -> Iterator[click.Context]:
    """A context for command and for each of its subcommands, depth first, in the order --help lists them."""
    context = click.Context(command, info_name=prog, parent=parent)
    yield context
    if isinstance(command, click.Group):
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            if sub is not None and not sub.hidden:
                yield from commands(sub, name, context)


def options(command: click.Command, prog: str) -> Iterator[CommandOption]:
    """Every option of command and its subcommands (the help option, which click adds, left out)."""
    for context in commands(command, prog):
        for param in context.command.params:
            if isinstance(param, click.Option) and not param.hidden:
                yield CommandOption(context.command_path, param, context)


def default_text(entry: CommandOption) -> str:
    """The default as a reader needs it: the value, "off"/"on" for a flag, "" when there is none."""
    option = entry.option
    value: Any = option.get_default(entry.context, call=False)
    if callable(value):
        return "(computed)"
    if option.is_flag and not option.secondary_opts:
        return "on" if value else "off"
    if option.is_flag:
        return option.opts[0] if value else option.secondary_opts[0]
    if value is None or (option.multiple and not value):
        return ""
    if value == "":
        return "empty"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(item) for item in value)
    return str(value)


def _code(text: str) -> nodes.Node | str:
    return nodes.literal(text, text) if text else ""


class CliConfiguration(SphinxDirective):
    """One section per command with options: option, environment variable, default, help."""

    required_arguments = 1
    option_spec = {"prog": directives.unchanged_required}  # noqa: RUF012  (docutils' interface)

    def run(self) -> list[nodes.Node]:
        self.env.note_reread()  # generated: read again at every build
        command = load(self.arguments[0])
        prog = self.options.get("prog", command.name or "")
        by_command: dict[str, list[CommandOption]] = {}
        for entry in options(command, prog):
            if entry.option.name not in NOT_SETTINGS:
                by_command.setdefault(entry.command, []).append(entry)
        result: list[nodes.Node] = []
        for name, entries in by_command.items():
            section = nodes.section(ids=[nodes.make_id(f"configuration-{name}")])
            section += nodes.title(name, name)
            rows = [
                [
                    _code(entry.flags),
                    _code(", ".join(entry.envvars)),
                    _code(default_text(entry)),
                    (entry.option.help or "").strip(),
                ]
                for entry in entries
            ]
            section += table(["Option", "Environment variable", "Default", "Meaning"], rows, [22, 28, 14, 36])
            result.append(section)
        return result


_SINGLE_BACKTICKS = re.compile(r"(?<!`)`([^`]+)`(?!`)")
# What sphinx-click writes into the lines itself, kept as it is: literals, the mark of a required option
_KEPT = re.compile(r"(``.*?``|\*\*Required\*\*)")


def plain_help(_app: Sphinx, _ctx: click.Context, lines: list[str]) -> None:
    """sphinx-click reads help texts as reStructuredText, click's --help prints them as they are.  In the
    text of each help line (not sphinx-click's own directives and fields), a `command` in single
    backticks becomes a literal, and ``*`` (a cron expression, ``backoff_base * 2^a``), quotes and
    ``--`` are escaped, so that they show as the terminal shows them (no emphasis, no curly quotes, no
    en dash in ``--queue``)."""
    for index, line in enumerate(lines):
        stripped = line.lstrip()
        if stripped.startswith((".. ", ":")):
            continue
        parts = _KEPT.split(_SINGLE_BACKTICKS.sub(r"``\1``", line))
        lines[index] = "".join(part if _KEPT.fullmatch(part) else _escape(part) for part in parts)


def _escape(text: str) -> str:
    for char in "\\*\"'":
        text = text.replace(char, "\\" + char)
    return text.replace("--", "-\\-")


def setup(app: Sphinx) -> dict[str, Any]:
    app.setup_extension("sphinx_click")
    app.connect("sphinx-click-process-description", plain_help)
    app.connect("sphinx-click-process-options", plain_help)
    app.connect("sphinx-click-process-arguments", plain_help)
    app.connect("sphinx-click-process-epilog", plain_help)
    app.add_directive("jobq-cli-configuration", CliConfiguration)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
