"""Shared fixtures: the anyio backends and paths to the optional shared data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SHARED = PROJECT_ROOT.parent / "shared"


@pytest.fixture
def anyio_backend() -> str:
    """Run async tests on asyncio (trio runs are opted into per test)."""
    return "asyncio"
