"""The programs in docs/examples run, print what they are meant to, and the user guide names each one.

Each example runs in its own interpreter (``sys.executable``), so its ``memory://`` boards start
empty and its job ids are predictable.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
GUIDE = ROOT / "docs" / "index.md"
TIMEOUT = 60

EXPECTED: dict[str, list[str]] = {
    "plans.py": [
        "plan: complete",
        "merge: total: 19 bytes from 2 pages",
        "flowchart LR",
        "  t0 --> t2",
    ],
    "worker.py": [
        "registered: ['worker-1']",
        "upload: complete - uploaded cat.png at 64px",
        "parse: trashed - failed on attempt 2 of 2: ValueError: notes.txt is not CSV",
        "stats: consumed=2 abandoned=2 trashed=1 lost=0",
        "after stop: [] True",
    ],
    "quickstart.py": [
        "listed: job-0000000003 resize high {'image': 'b.png', 'width': 128}",
        "listed: job-0000000002 resize normal {'image': 'a.png', 'width': 128}",
        "listed: job-0000000004 resize normal {'image': 'c.png', 'width': 128}",
        "listed: job-0000000001 cleanup low {'dir': '/tmp/scratch'}",
        "claimed: b.png by worker-1, attempt 1",
        "state while claimed: claimed, owner worker-1",
        "state after consume: complete",
        "jobs left on the board: 3",
    ],
    "settling.py": [
        "abandoned with retry_after: ...",
        "retried: attempt 2, generation 1 -> 2",
        "trashed: state trashed",
        "third claim: ...",
        "in the trash: parse: line 3: not CSV",
        "in the trash: flaky: max attempts exceeded (2)",
        "reclaimed: generation 1 -> 2",
        "stale claim: ClaimLost: ...",
        "wrong owner: NotOwner: ...",
    ],
    "linked_jobs.py": [
        "merge is waiting, depends on parts 3, 1, 2",
        "claiming it now: NotClaimable: ...",
        "after the last dependency: unclaimed",
        "dependency_results: ('part-3.bin', 'part-1.bin', 'part-2.bin')",
        "wait_for_completion: complete, result {'file': 'merged.bin', 'parts': 3}",
        "extract: trashed",
        "transform: trashed",
        "load: trashed",
        "load ended trashed: dependency job-0000000006 (transform) was trashed: ...",
    ],
    "watching.py": [
        "wait() woke up: ['send-mail']",
        "event: posted job-0000000002 ...",
        "event: claimed job-0000000002 ...",
        "event: consumed job-0000000002 ...",
        "event: dropped, count 7",
        "then: [('posted', 'job-0000000010'), ('posted', 'job-0000000011'), ('posted', 'job-0000000012')]",
        "entities: [('worker-7', {'host': 'build-3', 'pid': 4242})]",
        "entities after the worker's board closed: []",
    ],
    "keys.py": [
        "same job: True, jobs on the board: 1",
        "after consume: True, attempts 1, jobs on the board: 0",
        "another key: True, key 'order-43'",
    ],
    "custom_backend.py": [
        "installed schemes: ...",
        "BackendNotFound: no job-board backend for etcd:// ...",
        "the pyproject snippet registers: {'etcd': 'jobboard_etcd:EtcdBackend'}",
        "the conformance test snippet is valid Python",
    ],
}
"""Per example, lines its output must contain, in this order. A trailing ``...`` matches any rest of the line."""


def examples() -> list[Path]:
    return sorted(EXAMPLES.glob("*.py"))


def matches(line: str, expected: str) -> bool:
    if expected.endswith("..."):
        return line.startswith(expected[:-3])
    return line == expected


def missing_lines(output: str, expected: list[str]) -> list[str]:
    """The expected lines not found in ``output`` in order (each after the previous match)."""
    lines = output.splitlines()
    position = 0
    missing = []
    for wanted in expected:
        found = next((i for i in range(position, len(lines)) if matches(lines[i], wanted)), None)
        if found is None:
            missing.append(wanted)
        else:
            position = found + 1
    return missing


def test_there_are_examples() -> None:
    assert [path.name for path in examples()], f"no examples in {EXAMPLES}"


def test_every_example_has_expectations() -> None:
    assert sorted(path.name for path in examples()) == sorted(EXPECTED)


@pytest.mark.parametrize("example", examples(), ids=lambda path: path.name)
def test_example_runs(example: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(example)], cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, f"{example.name} exited {result.returncode}:\n{result.stderr}"
    assert result.stderr == "", f"{example.name} wrote to stderr:\n{result.stderr}"
    missing = missing_lines(result.stdout, EXPECTED.get(example.name, []))
    assert not missing, f"{example.name} did not print {missing}; it printed:\n{result.stdout}"


@pytest.mark.parametrize("example", examples(), ids=lambda path: path.name)
def test_example_is_referenced_from_the_guide(example: Path) -> None:
    assert f"docs/examples/{example.name}" in GUIDE.read_text(encoding="utf-8")
