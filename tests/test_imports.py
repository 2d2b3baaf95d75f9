"""Importing the library stays cheap: heavy dependencies load only when something uses them.

Each check runs in a fresh interpreter (``sys.modules`` of the test process already holds
everything). What is asserted is behaviour — which modules are loaded — not a time.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("litellm", "fsspec", "tiktoken", "tokenizers", "opentelemetry.sdk")
"""Modules that cost tens to thousands of milliseconds to import."""


def _loaded_after(code: str) -> set[str]:
    """Return which of `HEAVY` are in ``sys.modules`` after running ``code`` in a new process."""
    probe = (
        f"{code}\nimport json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_importing_the_packages_loads_no_heavy_module() -> None:
    assert _loaded_after("import harness, middleware, providers") == set()


def test_importing_the_packages_runs_none_of_their_modules() -> None:
    code = "import harness, middleware, providers, sys\nprint(sorted(m for m in sys.modules if m.startswith(('harness.', 'middleware.', 'providers.'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['harness._lazy']"  # the 40-line helper the packages share


@pytest.mark.parametrize(
    "code",
    [
        "from harness import HarnessAgent, acompletion, estimator_for",
        "from middleware import default_stack; default_stack()",
        "from providers import LiteLLMClient, ScriptedModel; LiteLLMClient(model='gpt-4o')",
    ],
)
def test_the_everyday_names_load_no_heavy_module(code: str) -> None:
    assert _loaded_after(code) == set()


def test_opening_a_workspace_loads_fsspec() -> None:
    loaded = _loaded_after(
        "import tempfile\nfrom harness import Workspace\nWorkspace(tempfile.mkdtemp())"
    )
    assert loaded == {"fsspec"}


def test_a_lazy_name_resolves_to_its_home_and_unknown_names_fail() -> None:
    import harness
    from harness.agent.loop import HarnessAgent

    assert harness.HarnessAgent is HarnessAgent
    assert "HarnessAgent" in dir(harness)
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        _ = harness.NoSuchThing
