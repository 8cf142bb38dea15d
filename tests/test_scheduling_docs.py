"""docs/scheduling.md: every Python block is a complete program that runs and prints the output shown after it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "scheduling.md"
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.DOTALL)


def programs() -> list[tuple[str, str]]:
    """Each ``python`` block with the ``output`` block that follows it (if any)."""
    blocks = BLOCK.findall(GUIDE.read_text(encoding="utf-8"))
    found = []
    for index, (language, text) in enumerate(blocks):
        if language == "python":
            following = blocks[index + 1] if index + 1 < len(blocks) else ("", "")
            found.append((text, following[1] if following[0] == "output" else ""))
    return found


def test_the_guide_has_programs_with_outputs() -> None:
    assert len(programs()) >= 4 and all(output for _, output in programs())


@pytest.mark.parametrize(("program", "output"), programs(), ids=[f"block-{n}" for n in range(len(programs()))])
def test_program_runs_and_prints_its_output(program: str, output: str, tmp_path: Path) -> None:
    script = tmp_path / "program.py"
    script.write_text(program)
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr
    assert result.stdout.splitlines() == output.splitlines()
