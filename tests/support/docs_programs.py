"""Docs pages whose Python blocks are complete programs, each followed by an ``output`` block."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.DOTALL)


def blocks(page: Path) -> list[tuple[str, str]]:
    """Every fenced block of ``page``: ``(language, text)``."""
    return BLOCK.findall(page.read_text(encoding="utf-8"))


def programs(page: Path) -> list[tuple[str, str]]:
    """Each ``python`` block of ``page`` with the ``output`` block that follows it (``""`` if none)."""
    found = blocks(page)
    pairs = []
    for index, (language, text) in enumerate(found):
        if language == "python":
            following = found[index + 1] if index + 1 < len(found) else ("", "")
            pairs.append((text, following[1] if following[0] == "output" else ""))
    return pairs


def check_program(program: str, output: str, workdir: Path) -> None:
    """Run ``program`` as a script in ``workdir``: exit 0, nothing on stderr, exactly ``output``."""
    script = workdir / "program.py"
    script.write_text(program)
    result = subprocess.run([sys.executable, str(script)], cwd=workdir, capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr
    assert result.stdout.splitlines() == output.splitlines()
