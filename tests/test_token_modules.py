"""harness.tokens is the public face of the private token modules, and the fit lands in its own."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any

import harness.tokens as tokens
from benchmarks.fit_estimator import FITTED, FITTED_FILE, format_block

ROOT = Path(__file__).resolve().parent.parent


def _homes() -> set[str]:
    """Return the private modules harness.tokens imports from."""
    tree = ast.parse((ROOT / "harness" / "tokens" / "__init__.py").read_text("utf-8"))
    return {
        node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        and node.module
        and node.module.startswith("harness.tokens._")
    }


def _public_definitions(module: str) -> set[str]:
    """Return the public names ``module`` defines at its top level (not those it imports)."""
    path = ROOT / f"{module.replace('.', '/')}.py"
    names: set[str] = set()
    for node in ast.parse(path.read_text("utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if not name.startswith("_")}


def test_every_public_name_of_the_token_modules_is_re_exported_as_itself() -> None:
    homes = _homes()
    assert "harness.tokens._approximate" in homes and "harness.tokens._exact_tokens" in homes
    for module in homes:
        home = importlib.import_module(module)
        for name in _public_definitions(module):
            assert name in tokens.__all__, f"harness.tokens.__all__ misses {module}.{name}"
            assert getattr(tokens, name) is getattr(home, name)
    assert len(set(tokens.__all__)) == len(tokens.__all__)
    for name in tokens.__all__:
        assert getattr(tokens, name) is not None


def test_the_fitter_writes_into_the_module_that_holds_the_fit() -> None:
    (holder,) = [m for m in _homes() if "FAMILY_COEFFICIENTS" in _public_definitions(m)]
    assert Path(str(importlib.import_module(holder).__file__)) == FITTED_FILE
    source = FITTED_FILE.read_text("utf-8")
    assert len(FITTED.findall(source)) == 1
    block = format_block(tokens.FAMILY_COEFFICIENTS, tokens.FAMILY_FLOOR)
    rewritten = FITTED.sub(lambda _: block, source, count=1)
    namespace: dict[str, Any] = {}
    exec(compile(rewritten, str(FITTED_FILE), "exec"), namespace)
    assert namespace["FAMILY_COEFFICIENTS"] == tokens.FAMILY_COEFFICIENTS
    assert namespace["FAMILY_FLOOR"] == tokens.FAMILY_FLOOR
