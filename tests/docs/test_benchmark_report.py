"""docs/benchmarks.md is rendered from committed JSON, and its analysis follows the figures."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

from benchmarks.analysis import reading
from benchmarks.lookup import TASKFLOW, find
from benchmarks.recorded import recorded_sections
from benchmarks.report import targets
from benchmarks.run import COMPANION, RECORDED, ROOT, read_results, report_of

REPORT, RESULTS = ROOT / "docs" / "benchmarks.md", ROOT / "docs" / "benchmarks.json"


def committed() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    return read_results(RESULTS)


def test_the_report_is_the_committed_json_rendered() -> None:
    assert report_of(RESULTS) == REPORT.read_text(), (
        "docs/benchmarks.md differs from its JSON rendered: python -m benchmarks.run --render-from docs/benchmarks.json")


def test_the_analysis_quotes_this_runs_taskflow_figures() -> None:
    header, results = committed()
    before = "\n".join(reading(results, header["facts"], read_results(COMPANION)))
    changed = copy.deepcopy(results)
    taskflow = find(changed, TASKFLOW, 16)
    assert taskflow is not None
    taskflow["median"]["cycles_per_s"], taskflow["median"]["failed_claims"] = 777.7, 4321
    after = "\n".join(reading(changed, header["facts"], read_results(COMPANION)))
    assert "to 46.6 cycles/s" in before and "14,884 failed claims" in before
    assert "to 777.7 cycles/s" in after and "4,321 failed claims" in after
    assert "**TaskFlow gets slower" in before and "**TaskFlow does not get slower" in after


def test_a_sentence_without_its_figures_is_left_out() -> None:
    header, results = committed()
    without = [r for r in results if r.get("system") != TASKFLOW]
    text = "\n".join(reading(without, header["facts"]))
    assert "TaskFlow gets slower" not in text and "**Job count.**" not in text and "**Posts.**" not in text


def test_the_posts_goal_names_each_sides_concurrency() -> None:
    _, results = committed()
    row = next(line for line in targets(results) if line.startswith("| posts ≥ 30×"))
    assert "jobboard 64 posts in flight, TaskFlow one" in row and "(unequal concurrency)" in row
    changed = copy.deepcopy(results)
    ours = find(changed, "jobboard", 16)
    assert ours is not None
    ours["post_concurrency"] = 8
    assert "jobboard 8 posts in flight" in next(line for line in targets(changed) if line.startswith("| posts ≥"))


def test_a_recorded_ratio_follows_its_json(tmp_path: Path) -> None:
    shutil.copytree(RECORDED, tmp_path, dirs_exist_ok=True)
    path = tmp_path / "01-redis-queues.json"
    document = json.loads(path.read_text())
    newest = document["parts"][0]["runs"][0]["output"]["medians"]
    assert "2,322/s (11.1×)" in "\n".join(recorded_sections(tmp_path))
    newest["saq"]["16"]["cycles_per_s"] = 5000
    path.write_text(json.dumps(document))
    rendered = "\n".join(recorded_sections(tmp_path))
    assert "5,000/s (5.2×)" in rendered and "2,322/s" not in rendered
