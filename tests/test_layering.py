"""The public surface and the layering rules between packages.

The layering rules read every import of every module under ``harness/``, ``middleware/`` and
``providers/`` (`imported_modules`): module-level and function-level ``import`` statements,
those under ``if TYPE_CHECKING:``, ``importlib.import_module("…")`` / ``__import__("…")``
with a literal name (or an f-string's literal prefix), and the module paths of a lazy face's
``_HOMES``. The rules (`broken_rule`):

- nothing in ``harness/`` imports ``benchmarks`` (the benchmarks ship with the checkout only);
- within ``harness/``, only the composition roots — ``harness/agent/``, ``harness/adapters/``
  and ``harness/cli/`` — import ``middleware`` or ``providers``: the kernel (``harness/*.py``)
  and its wings (``tokens/``, ``accounting/``, ``presend/``, ``sessions/``, ``fragments/``, and
  any wing added later) import neither;
- within ``middleware/``, only ``middleware/stack.py`` (and the package face) knows several
  middleware: a middleware imports its own modules and the shared ones (``middleware/_*.py``,
  ``middleware/memory.py``), never another middleware's module, and no provider;
- ``providers/`` never imports ``middleware/``, nor anything ``benchmarks``;
- only ``providers/`` imports litellm.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PACKAGES = ("harness", "middleware", "providers")
"""The packages whose imports the layering rules read."""

COMPOSITION_ROOTS = ("harness/agent/", "harness/adapters/", "harness/cli/")
"""The parts of ``harness/`` that build stacks and clients: they may import both."""

SHARED_MIDDLEWARE_MODULES = frozenset({"memory"})
"""Modules of ``middleware/`` that are not a middleware (besides the private ``_*`` ones)."""


@pytest.mark.parametrize("package", PACKAGES)
def test_all_is_complete_and_importable(package: str) -> None:
    module = importlib.import_module(package)
    exported = set(module.__all__)
    for name in exported:
        assert getattr(module, name) is not None
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and getattr(value, "__module__", "").startswith(f"{package}.")
        and (isinstance(value, type) or callable(value))
    }
    assert public <= exported, f"{package}.__all__ misses {sorted(public - exported)}"


# ------------------------------------------------------------------ reading every import
def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _literal_module(node: ast.expr) -> str | None:
    """Return the module a literal names: a string, or an f-string's literal prefix."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if (
        isinstance(node, ast.JoinedStr)
        and node.values
        and isinstance(node.values[0], ast.Constant)
        and isinstance(node.values[0].value, str)
    ):
        return node.values[0].value.rstrip(".") or None
    return None


def _is_dynamic_import(call: ast.Call) -> bool:
    func = call.func
    name = (
        func.attr
        if isinstance(func, ast.Attribute)
        else func.id
        if isinstance(func, ast.Name)
        else ""
    )
    return name in ("import_module", "__import__") and bool(call.args)


def imported_modules(path: Path, root: Path = ROOT) -> list[tuple[str, int]]:
    """Return every module ``path`` imports, with its line, however it imports it.

    ``from a.b import c`` yields ``a.b`` and ``a.b.c`` (``c`` may be a module); a relative
    import is resolved against the module's package.
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    module = _module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            found.append((name, node.lineno))
            found += [(f"{name}.{alias.name}", node.lineno) for alias in node.names]
        elif isinstance(node, ast.Call) and _is_dynamic_import(node):
            literal = _literal_module(node.args[0])
            if literal is not None:
                found.append((literal, node.lineno))
        elif isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Dict):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "_HOMES" for t in targets):
                for value in node.value.values:
                    home = _literal_module(value)
                    if home is not None:
                        found.append((home, value.lineno))
    return found


def broken_rule(path: str, target: str) -> str | None:
    """Return the rule that importing ``target`` from the file at ``path`` breaks, if any.

    ``path`` is relative to the checkout, with ``/`` separators.
    """
    top, _, rest = target.partition(".")
    if path.startswith("harness/"):
        if top == "benchmarks":
            return "nothing in harness/ imports benchmarks"
        if top in ("middleware", "providers") and not path.startswith(COMPOSITION_ROOTS):
            return (
                "only harness/agent/, harness/adapters/ and harness/cli/ import middleware "
                "or providers; the kernel and its wings import neither"
            )
        if top == "litellm":
            return "only providers/ import litellm"
    elif path.startswith("middleware/"):
        if top in ("benchmarks", "litellm"):
            return f"middleware/ never imports {top}"
        if path in ("middleware/stack.py", "middleware/__init__.py"):
            return None
        if top == "providers":
            return "within middleware/, only middleware/stack.py imports providers"
        if top == "middleware" and rest:
            concern = rest.split(".")[0]
            own = path.removeprefix("middleware/").split("/")[0].removesuffix(".py")
            shared = concern.startswith("_") or concern in SHARED_MIDDLEWARE_MODULES
            if concern != own and not shared:
                return (
                    f"a middleware never imports another middleware's module "
                    f"(middleware.{concern}); only middleware/stack.py knows several"
                )
    elif path.startswith("providers/") and top in ("middleware", "benchmarks"):
        return f"providers/ never imports {top}"
    return None


def _broken(root: Path = ROOT) -> list[str]:
    """Return each import under ``root`` that breaks a rule (one line per statement and rule)."""
    broken: dict[tuple[str, int, str], str] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            for target, line in imported_modules(path, root):
                rule = broken_rule(relative, target)
                if rule is not None:
                    broken.setdefault(
                        (relative, line, rule), f"{relative}:{line} imports {target}: {rule}"
                    )
    return list(broken.values())


def test_every_import_keeps_the_layering() -> None:
    broken = _broken()
    assert not broken, "\n".join(broken)


PLANTED = """
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from middleware.budget_fit import BudgetFit

_HOMES = {"BudgetFit": "middleware.budget_fit"}


def later() -> None:
    from providers import ScriptedModel

    import benchmarks.workloads

    importlib.import_module("middleware.compaction")
    importlib.import_module(f"providers.{'scripted'}")
"""


@pytest.mark.parametrize(
    "where",
    ["harness/planted.py", "harness/tokens/planted.py", "harness/sessions/sqlite/planted.py"],
)
def test_the_layering_check_finds_every_form_of_import(tmp_path: Path, where: str) -> None:
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    planted = tmp_path / where
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text(PLANTED)
    lines = {int(b.split(":")[1].split()[0]) for b in _broken(tmp_path)}
    # the TYPE_CHECKING import, the _HOMES value, the function-level imports, both literals
    assert lines == {8, 10, 14, 16, 18, 19}, _broken(tmp_path)


@pytest.mark.parametrize(
    ("path", "target", "allowed"),
    [
        ("harness/agent/loop.py", "middleware", True),
        ("harness/adapters/completion.py", "providers.passthrough", True),
        ("harness/cli/demo.py", "providers.scripted", True),
        ("harness/cli/main.py", "benchmarks.__main__", False),
        ("harness/chain.py", "middleware.stack", False),
        ("harness/accounting/_tally.py", "providers", False),
        ("harness/fragments/model.py", "middleware", False),
        ("harness/presend/pairs.py", "providers.scripted", False),
        ("middleware/stack.py", "middleware.task_state", True),
        ("middleware/compaction/__init__.py", "middleware.compaction._trim", True),
        ("middleware/compaction/__init__.py", "middleware.memory", True),
        ("middleware/budget_fit.py", "middleware._layout", True),
        ("middleware/budget_fit.py", "middleware.compaction", False),
        ("middleware/tracing.py", "providers", False),
        ("providers/scripted.py", "middleware", False),
        ("providers/proxy_hook.py", "harness.adapters.completion", True),
    ],
)
def test_the_rules(path: str, target: str, allowed: bool) -> None:
    assert (broken_rule(path, target) is None) is allowed


def test_importing_the_library_does_not_import_litellm() -> None:
    code = (
        "import sys, harness, middleware, providers; "
        "from providers import LiteLLMClient; "
        "print('litellm' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------------ the lazy faces
def _lazy_faces() -> list[Path]:
    return [
        path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("__init__.py"))
        if "_HOMES" in path.read_text()
    ]


def _type_checking_imports(tree: ast.Module) -> dict[str, str]:
    """Return name → module of the face's ``if TYPE_CHECKING:`` imports."""
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom) and statement.module, statement
                for alias in statement.names:
                    names[alias.asname or alias.name] = statement.module
    return names


def test_the_lazy_faces_are_found() -> None:
    assert {p.relative_to(ROOT).as_posix() for p in _lazy_faces()} >= {
        "harness/__init__.py",
        "middleware/__init__.py",
        "providers/__init__.py",
    }


@pytest.mark.parametrize("face", _lazy_faces(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_lazy_face_imports_for_the_type_checker_exactly_what_it_exports(face: Path) -> None:
    module = importlib.import_module(_module_name(face, ROOT))
    homes: dict[str, str] = module._HOMES
    assert _type_checking_imports(ast.parse(face.read_text())) == homes
    assert module.__all__ == sorted(homes)
    for name, home in homes.items():
        assert getattr(module, name) is getattr(importlib.import_module(home), name), name
