"""Every Python snippet of docs/retention.md runs as it is and prints what the page says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "retention.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)
EXPECTED = [
    ["running: ", "done"],
    ["result: report done", "later: complete None", "audit: audit done"],
    ["requeued: True 0 unclaimed", "refused: job ", "purged: 2", "child: True"],
]


def test_the_page_has_the_snippets() -> None:
    assert len(SNIPPETS) == len(EXPECTED)
    assert all("import " in snippet for snippet in SNIPPETS)


@pytest.mark.parametrize(("index", "expected"), list(enumerate(EXPECTED)))
def test_snippet_runs(index: int, expected: list[str]) -> None:
    result = subprocess.run([sys.executable, "-c", SNIPPETS[index]], cwd=ROOT, capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(expected) and all(line.startswith(want) for line, want in zip(lines, expected,
                                                                                              strict=True)), lines
