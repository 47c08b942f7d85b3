"""load_tasks: the registry ``pgjobq worker --tasks MODULE[:ATTRIBUTE]`` names."""

from __future__ import annotations

import importlib
import os
import sys

from pgjobq._errors import ConfigurationError
from pgjobq._tasks.registry import Tasks

__all__ = ["load_tasks"]


def load_tasks(spec: str) -> Tasks:
    """The :class:`pgjobq.Tasks` that spec names: ``"module"`` (its one module-level Tasks) or
    ``"module:attribute"``.

    The current directory is importable, as for ``pgjobq worker
    MODULE:FUNCTION``.  ConfigurationError, saying what is wrong, when the
    module cannot be imported (an error the module itself raises while it
    is imported, such as a task name registered twice, is raised as it is),
    has no such attribute, or that attribute is not a Tasks; for a bare
    module, when it has no module-level Tasks, or several (name one then).
    """
    if not isinstance(spec, str):
        raise ConfigurationError(
            f"tasks must be a string, MODULE or MODULE:ATTRIBUTE, got {type(spec).__name__}"
        )
    module_name, colon, attribute = spec.partition(":")
    if not module_name or (colon and not attribute):
        raise ConfigurationError(f"tasks must be MODULE or MODULE:ATTRIBUTE, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        named = exc.name is not None and (module_name == exc.name or module_name.startswith(f"{exc.name}."))
        if not named:  # a module that the tasks' module imports is missing: raised as it is
            raise
        raise ConfigurationError(f"cannot import the tasks' module {module_name!r}: {exc}") from exc
    if colon:
        if not hasattr(module, attribute):
            raise ConfigurationError(f"module {module_name!r} has no attribute {attribute!r}")
        found = getattr(module, attribute)
        if not isinstance(found, Tasks):
            raise ConfigurationError(f"{spec} is a {type(found).__name__}, not a pgjobq.Tasks")
        return found
    registries: dict[int, list[str]] = {}
    values: dict[int, Tasks] = {}
    for name, value in sorted(vars(module).items()):
        if isinstance(value, Tasks):
            registries.setdefault(id(value), []).append(name)
            values[id(value)] = value
    if not values:
        raise ConfigurationError(
            f"module {module_name!r} has no pgjobq.Tasks at module level: name the registry as "
            f"{module_name}:ATTRIBUTE"
        )
    if len(values) > 1:
        names = ", ".join(" = ".join(group) for group in sorted(registries.values()))
        raise ConfigurationError(
            f"module {module_name!r} has several pgjobq.Tasks ({names}): name one as {module_name}:ATTRIBUTE"
        )
    return next(iter(values.values()))
