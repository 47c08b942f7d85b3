"""Every option of every command has its PGJOBQ_ environment-variable twin, shown in --help, and the twin
sets what the flag sets.

Read in-process: click parses each command line (make_context) without running the command, so every
option of every command is checked in a moment, without a database.
"""

from __future__ import annotations

import os

import click
import pytest

from pgjobq._cli import main


def leaf_commands(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    """Every command under group by its full name ("jobs list"), the groups' subcommands included."""
    found: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found.update(leaf_commands(command, f"{prefix}{name} "))
        else:
            found[f"{prefix}{name}"] = command
    return found


COMMANDS = leaf_commands(main)
WITHOUT_OPTIONS = {"completion", "sql pgtle"}  # an argument only, or nothing at all


def options(command: click.Command) -> list[click.Option]:
    return [
        param
        for param in command.params
        if isinstance(param, click.Option) and param.name not in ("help", "version")
    ]


OPTIONS = [
    (name, option.opts[0]) for name, command in sorted(COMMANDS.items()) for option in options(command)
]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_option_has_an_environment_twin_shown_in_help(command: str) -> None:
    found = options(COMMANDS[command])
    shown = " ".join(COMMANDS[command].get_help(click.Context(COMMANDS[command], info_name=command)).split())

    assert bool(found) == (command not in WITHOUT_OPTIONS)
    for option in found:
        assert isinstance(option.envvar, str) and option.envvar.startswith("PGJOBQ_"), option.name
        assert option.show_envvar, option.name
        assert f"env var: {option.envvar}" in shown, option.name


def required_words(command: click.Command, but: click.Option) -> list[str]:
    """Values for the command's required arguments, and its required options other than but."""
    words: list[str] = []
    for param in command.params:
        if not param.required or param is but:
            continue
        value = "1" if param.type is click.INT else "x"
        if isinstance(param.type, click.Choice):
            value = str(param.type.choices[0])
        words.extend([value] if isinstance(param, click.Argument) else [param.opts[0], value])
    return words


def parsed(command: click.Command, option: click.Option, words: list[str]) -> object:
    """option's value once click has parsed the command line words (and the environment)."""
    context = command.make_context("pgjobq", [*required_words(command, option), *words])
    assert option.name is not None
    return context.params[option.name]


def sample(option: click.Option, default: object) -> tuple[list[str], str]:
    """A value for option other than its default: as command-line words, and as its variable's text."""
    flag = option.opts[0]
    if option.is_flag:
        return ([option.secondary_opts[0]], "false") if default else ([flag], "true")
    choices = option.type.choices if isinstance(option.type, click.Choice) else ("7", "3", "2.5", "sample")
    texts = []
    for choice in map(str, choices):
        try:
            value = option.type.convert(choice, option, None)
        except click.BadParameter:
            continue
        if value != default:
            texts.append(choice)
    if option.multiple:  # two values: the variable separates them by spaces
        return [word for text in texts[:2] for word in (flag, text)], " ".join(texts[:2])
    return [flag, texts[0]], texts[0]


@pytest.mark.parametrize(("command", "flag"), OPTIONS, ids=[f"{c} {f}" for c, f in OPTIONS])
def test_the_environment_twin_sets_what_the_flag_sets(
    monkeypatch: pytest.MonkeyPatch, command: str, flag: str
) -> None:
    for name in os.environ:
        if name.startswith("PGJOBQ_"):
            monkeypatch.delenv(name)
    cli = COMMANDS[command]
    (option,) = (option for option in options(cli) if option.opts[0] == flag)
    default = None if option.required else parsed(cli, option, [])
    words, text = sample(option, default)

    from_the_line = parsed(cli, option, words)
    assert isinstance(option.envvar, str)
    monkeypatch.setenv(option.envvar, text)
    from_the_environment = parsed(cli, option, [])

    assert from_the_line != default
    assert from_the_environment == from_the_line


# The worker's variables that other commands read too, each for the same thing: the database, and the
# address of the Prometheus metrics (pgjobq metrics serves them where a worker's --metrics-port would).
SHARED_WITH_THE_WORKER = {"PGJOBQ_DSN", "PGJOBQ_METRICS_PORT", "PGJOBQ_METRICS_HOST"}


def test_no_other_command_reads_a_variable_of_the_worker() -> None:
    """A worker container's environment (PGJOBQ_QUEUE above all) must not filter an operator's command."""
    workers = {option.envvar for option in options(COMMANDS["worker"])} - SHARED_WITH_THE_WORKER

    readers = {
        (name, option.envvar)
        for name, command in COMMANDS.items()
        if name != "worker"
        for option in options(command)
        if option.envvar in workers
    }

    assert "PGJOBQ_QUEUE" in workers
    assert readers == set()
