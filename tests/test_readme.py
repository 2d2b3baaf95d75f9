"""The README stays true: its example runs, and its commands exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_example_runs(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    (example,) = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    assert len(example.strip().splitlines()) <= 22
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", example],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("Looking at the failing tests.")
    assert (tmp_path / "workspace").is_dir()


def test_the_readme_names_every_default_middleware() -> None:
    from middleware import default_stack

    readme = (ROOT / "README.md").read_text()
    for middleware in default_stack():
        assert f"| `{type(middleware).__name__}` |" in readme
    for command in ("make run", "make test"):
        assert command in readme


def test_the_readme_benchmark_table_is_generated_from_the_committed_results() -> None:
    from benchmarks.readme_table import latest, replace_block, table

    readme = (ROOT / "README.md").read_text("utf-8")
    block = table(latest(ROOT / "benchmarks" / "results"))
    assert replace_block(readme, block) == readme, "run `python -m benchmarks --readme`"
