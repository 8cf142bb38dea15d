"""The README's code runs and prints what it says it prints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)
    assert blocks, "the README has no python example"
    done = subprocess.run([sys.executable, "-c", blocks[0]], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "publish ({'width': 64},)"


def test_readme_quick_start_has_exactly_two_setup_commands() -> None:
    quick_start = README.read_text().split("## Quick start", 1)[1].split("##", 1)[0]
    commands = re.findall(r"^bash (\S+)", quick_start, re.MULTILINE)
    assert commands == ["scripts/demo", "scripts/test"]
    ci = (README.parent / ".ci" / "run").read_text()
    assert "scripts/test" in ci
