"""Lazy package exports (PEP 562): a name is imported from its home module on first use.

`import harness`, `import middleware` and `import providers` then cost almost nothing, and a
program pays only for the parts it touches.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, namespace: dict[str, Any], homes: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """Return a package's ``__getattr__`` and ``__dir__`` for the names in ``homes``.

    Args:
        package: the package's ``__name__`` (for the error message).
        namespace: the package's ``globals()``; a name, once imported, is stored there so
            later lookups skip ``__getattr__``.
        homes: exported name → the module it lives in.
    """

    def __getattr__(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *homes})

    return __getattr__, __dir__
