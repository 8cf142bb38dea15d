"""Every ``python`` block in docs/ runs, or says why not; the public API is importable from ``jobboard``.

A block preceded by ``<!-- snippet: excerpt of docs/examples/X.py -->`` must be made of lines of that
program (which tests/docs/test_examples.py runs); one preceded by ``<!-- snippet: not runnable: REASON -->``
gives a reason. Any other block is a complete program: it is run, and prints the ``output`` block
after it if there is one. The programs of the pages in RUN_ELSEWHERE are run by their own tests.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import jobboard

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RUN_ELSEWHERE = {"worker.md": "tests/docs/test_programs.py", "scheduling.md": "tests/docs/test_programs.py",
                 "metrics.md": "tests/observe/test_metrics_docs.py"}
BLOCK = re.compile(r"(?:<!-- snippet: (?P<marker>.*?) -->\n)?```(?P<language>\w+)\n(?P<code>.*?)```", re.DOTALL)
EXCERPT = re.compile(r"excerpt of (docs/examples/\w+\.py)$")


@dataclass(frozen=True)
class Snippet:
    where: str
    marker: str | None
    code: str
    output: str | None


def snippets() -> list[Snippet]:
    found = []
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        blocks = list(BLOCK.finditer(text))
        for index, block in enumerate(blocks):
            if block["language"] != "python":
                continue
            following = blocks[index + 1] if index + 1 < len(blocks) else None
            output = following["code"] if following is not None and following["language"] == "output" else None
            line = text[:block.start("language")].count("\n") + 1
            found.append(Snippet(f"{page.relative_to(ROOT)}:{line}", block["marker"], block["code"], output))
    return found


@pytest.mark.parametrize("snippet", snippets(), ids=lambda snippet: snippet.where)
def test_every_python_block_in_the_docs_runs_or_says_why_not(snippet: Snippet, tmp_path: Path) -> None:
    if snippet.marker is not None:
        excerpt = EXCERPT.match(snippet.marker)
        if excerpt is None:
            reason = snippet.marker.removeprefix("not runnable:").strip()
            assert snippet.marker.startswith("not runnable:") and len(reason) >= 10, snippet.marker
            return
        program = {line.strip() for line in (ROOT / excerpt[1]).read_text(encoding="utf-8").splitlines()}
        foreign = [line for line in snippet.code.splitlines() if line.strip() not in program | {"", "..."}]
        assert not foreign, f"{snippet.where}: not in {excerpt[1]}: {foreign}"
        return
    if Path(snippet.where.split(":")[0]).name in RUN_ELSEWHERE:
        return
    script = tmp_path / "snippet.py"
    script.write_text(snippet.code, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, check=False)
    assert (done.returncode, done.stderr) == (0, ""), f"{snippet.where}:\n{done.stderr}"
    if snippet.output is not None:
        assert done.stdout.splitlines() == snippet.output.splitlines()


def test_the_plans_page_shows_the_example_program_in_full() -> None:
    [block] = [s for s in snippets() if s.where.startswith("docs/dag.md")]
    assert block.code == (DOCS / "examples" / "plans.py").read_text(encoding="utf-8")


def test_the_public_api_is_importable_from_the_package() -> None:
    from jobboard import (  # noqa: F401  (the names the issue asks for)
        Fail,
        Handlers,
        JobContext,
        Plan,
        Retry,
        RetryPolicy,
        Worker,
        WorkerConfig,
        post_plan,
    )

    assert sorted(jobboard.__all__) == sorted(jobboard._WHERE)
    for name in jobboard.__all__:
        module = sys.modules.get(jobboard._WHERE[name]) or __import__(jobboard._WHERE[name], fromlist=[name])
        assert getattr(jobboard, name) is getattr(module, name), name
    with pytest.raises(AttributeError, match="no_such_name"):
        jobboard.no_such_name  # noqa: B018


def test_importing_jobboard_stays_cheap() -> None:
    """The names load on first use: ``import jobboard`` imports none of the library's modules."""
    probe = ("import sys, jobboard; from jobboard import Worker;"
             "print(sorted(m for m in ('anyio', 'jobboard.board.contract', 'jobboard.worker.conductor', 'msgpack') if m in sys.modules))")
    cheap = subprocess.run([sys.executable, "-c", ("import sys, jobboard; print(sorted(m for m in sys.modules "
                            "if m.startswith(('jobboard.', 'anyio', 'msgpack', 'typing'))))")],
                           capture_output=True, text=True, timeout=30, check=False)
    assert cheap.stdout.strip() == "[]", cheap.stdout
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=30, check=False)
    assert loaded.stdout.strip() == "['anyio', 'jobboard.board.contract', 'jobboard.worker.conductor', 'msgpack']", loaded.stderr
