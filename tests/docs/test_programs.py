"""docs/worker.md and docs/scheduling.md: every Python block is a complete program that runs and
prints the output shown after it (docs/metrics.md's programs run in tests/observe/test_metrics_docs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.docs_programs import ROOT, check_program, programs

GUIDES = {name: ROOT / "docs" / f"{name}.md" for name in ("worker", "scheduling")}
CASES = [(name, index, program, output) for name, page in GUIDES.items()
         for index, (program, output) in enumerate(programs(page))]


@pytest.mark.parametrize("page", GUIDES.values(), ids=GUIDES.keys())
def test_the_guide_has_programs_with_outputs(page: Path) -> None:
    assert len(programs(page)) >= 4 and all(output for _, output in programs(page))


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("guide", "index", "program", "output"), CASES,
                         ids=[f"{name}-block-{index}" for name, index, _, _ in CASES])
def test_program_runs_and_prints_its_output(guide: str, index: int, program: str, output: str,
                                            tmp_path: Path) -> None:
    check_program(program, output, tmp_path)
