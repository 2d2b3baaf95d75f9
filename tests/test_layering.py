"""The public surface and the layering rules between packages."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("package", ["harness", "middleware", "providers"])
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


def _imports(path: Path, *, module_level: bool = False) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in tree.body if module_level else ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_providers_never_import_middleware() -> None:
    for path in (ROOT / "providers").glob("*.py"):
        assert "middleware" not in _imports(path), path


def test_only_providers_import_litellm() -> None:
    for package in ("harness", "middleware"):
        for path in (ROOT / package).glob("*.py"):
            assert "litellm" not in _imports(path), path


def test_importing_the_library_does_not_import_litellm() -> None:
    code = (
        "import sys, harness, middleware, providers; "
        "from providers import LiteLLMClient; "
        "print('litellm' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _module_level_imports(path: Path) -> set[str]:
    """Top-level packages imported when ``path`` is imported (not inside functions)."""
    return _imports(path, module_level=True)


def test_the_core_imports_neither_middleware_nor_providers_at_module_level() -> None:
    for path in (ROOT / "harness").rglob("*.py"):
        found = _module_level_imports(path) & {"middleware", "providers", "benchmarks"}
        assert not found, f"{path.relative_to(ROOT)} imports {sorted(found)} at module level"
