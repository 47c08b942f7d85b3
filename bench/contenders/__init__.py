"""The contenders bench/run.py can measure, found by name.

Each module listed in MODULES holds one or more concrete ``Contender``
subclasses (base.py).  ``load_catalog()`` imports them only when called; a
module that does not exist yet, or whose third-party package cannot be
imported, is left out and the catalog says why, so the report can list it
as skipped.  Inside this package, modules import each other relatively
(``from .base import Contender``), so they work whatever the package is
called on sys.path.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field

from ._util import describe
from .base import Contender

__all__ = ["MODULES", "Catalog", "load_catalog"]

# The order of the report: our floor, our ceiling, pgjobq, then the others.
MODULES: tuple[str, ...] = (
    "article",
    "sql_ceiling",
    "pgjobq_sql",
    "pgjobq_worker",
    "pgqueuer_",
    "procrastinate_",
    "pgmq_",
    "redis_lmove",
    "rq_",
)


@dataclass
class Catalog:
    """The contenders found (name -> class, in report order) and the modules left out (module -> why)."""

    contenders: dict[str, type[Contender]] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)


def load_catalog() -> Catalog:
    """Import every contender module that exists and collect its concrete Contender subclasses."""
    catalog = Catalog()
    for stem in MODULES:
        module_name = f"{__name__}.{stem}"
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            missing = exc.name or "?"
            catalog.unavailable[stem] = (
                f"bench/contenders/{stem}.py does not exist"
                if missing == module_name
                else f"cannot import {missing} ({describe(exc)})"
            )
            continue
        except Exception as exc:  # a broken contender must not stop the others
            catalog.unavailable[stem] = f"import failed: {describe(exc)}"
            continue
        found = [
            obj
            for obj in vars(module).values()
            if isinstance(obj, type)
            and issubclass(obj, Contender)
            and obj.__module__ == module.__name__
            and not inspect.isabstract(obj)
        ]
        if not found:
            catalog.unavailable[stem] = "defines no concrete Contender"
        for cls in found:
            if cls.name in catalog.contenders:
                catalog.unavailable[f"{stem}.{cls.__name__}"] = f"name {cls.name!r} already taken"
            else:
                catalog.contenders[cls.name] = cls
    return catalog
