"""Shared fixtures: the anyio backends and paths to the optional shared data."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SHARED = PROJECT_ROOT.parent / "shared"


@pytest.fixture(scope="session", autouse=True)
def exact_tokenizers_loaded() -> None:
    """Load every family's exact tokenizer once, before any test runs.

    The approximate estimator counts a few texts exactly far from the limit (short texts that
    are mostly runs, periodic texts), loading the tokenizer on first use (0.4–1.8 s), and
    hypothesis draws such texts often: its deadlines must time the code under test, not that
    load.
    """
    from harness.tokens import FAMILIES, shared_exact

    for family in FAMILIES:
        shared_exact(family).count("x")


@pytest.fixture
def anyio_backend() -> str:
    """Run async tests on asyncio (trio runs are opted into per test)."""
    return "asyncio"


@pytest.fixture(autouse=True)
def learned_calibration_forgotten() -> Iterator[None]:
    """The ratios learned from reported usage are process-wide: each test starts with none."""
    from harness.tokens.calibration import LEARNED

    LEARNED.forget()
    yield
    LEARNED.forget()
