"""A third-party backend, dict:// (docs/examples/third_party), registered through a real entry point and run
through the conformance suite and the model-based test, as the in-tree backends are.

Registration is what ``pip install docs/examples/third_party`` would leave on ``sys.path``: the package and a
``jobboard_dict-0.1.dist-info`` directory whose ``entry_points.txt`` is written from the distribution's own
pyproject.toml (nothing is installed into the venv, so no other test sees ``dict://``). The snippets of
docs/writing-a-backend.md that are excerpts are checked here to be lines of the files these tests run.
"""

from __future__ import annotations

import ast
import re
import tomllib
import uuid
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path

import anyio
import pytest

from jobboard.board.contract import JobBoard
from jobboard.board.registry import ENTRY_POINT_GROUP, installed_schemes, open_board
from jobboard.testing import JobBoardConformance
from jobboard.testing.stateful import run_model_test

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = ROOT / "docs" / "examples" / "third_party"
PACKAGE = DISTRIBUTION / "jobboard_dict"
PAGE = ROOT / "docs" / "writing-a-backend.md"
MAX_LINES = 400
INTERFACE = {"jobboard.backend", "jobboard.errors"}
"""The jobboard modules a third-party backend imports: the interface and the errors of the contract."""


def write_dist_info(site: Path) -> Path:
    """The ``*.dist-info`` an installer writes for the distribution: METADATA and its entry points."""
    project = tomllib.loads((DISTRIBUTION / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n", encoding="utf-8")
    lines = [f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in points.items())
             for group, points in project["entry-points"].items()]
    (info / "entry_points.txt").write_text("\n".join(lines), encoding="utf-8")
    return info


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    write_dist_info(site)
    return site


@pytest.fixture
def installed(site: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """dict:// is installed for this test only: its dist-info and its package are on ``sys.path``."""
    monkeypatch.syspath_prepend(str(DISTRIBUTION))
    monkeypatch.syspath_prepend(str(site))
    yield


class TestDictConformance(JobBoardConformance):
    unsupported = frozenset({"report_progress", "purge", "requeue", "result_ttl", "trash_ttl"})

    @pytest.fixture
    def board_url(self, installed: None) -> str:
        return f"dict://conformance-{uuid.uuid4().hex}"

    def next_id(self, job_id: str) -> str:
        return f"dict-{int(job_id.removeprefix('dict-')) + 1}"

    async def inject_malformed(self, board: JobBoard) -> None:
        from jobboard_dict import DictBackend

        assert isinstance(board.backend, DictBackend)
        board.backend.inject_malformed(b"\x93not a posting")


def test_dict_board_follows_the_model(installed: None) -> None:
    run_model_test(lambda: f"dict://model-{uuid.uuid4().hex}", examples=20)


def test_it_is_registered_like_the_in_tree_backends(installed: None) -> None:
    points = {point.name: point for point in entry_points(group=ENTRY_POINT_GROUP)}
    assert "dict" in installed_schemes()
    assert (points["dict"].value, points["dict"].dist and points["dict"].dist.name) == (
        "jobboard_dict:DictBackend", "jobboard-dict")
    assert points["memory"].value == "jobboard_memory:MemoryBackend"  # the same form: module:Backend subclass
    board = open_board("dict://registered")
    assert type(board) is JobBoard and type(board.backend).__name__ == "DictBackend"


async def test_it_is_gone_when_uninstalled() -> None:
    assert "dict" not in installed_schemes()  # nothing leaked into the venv or into other tests


async def test_two_boards_on_one_name_share_it(installed: None) -> None:
    with anyio.fail_after(5):
        async with open_board("dict://shared") as poster, open_board("dict://shared") as worker:
            job = await poster.post("resize", {"w": 64})
            claim = await worker.claim_next("w1")
            assert claim is not None and claim.job.id == job.id
            await worker.consume(claim)
            assert await poster.job_count() == 0


def test_it_imports_only_the_interface_and_stays_small() -> None:
    imported, lines = set(), 0
    for source in sorted(PACKAGE.glob("*.py")):
        text = source.read_text(encoding="utf-8")
        lines += len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
    assert {name for name in imported if name.split(".")[0] == "jobboard"} == INTERFACE
    assert lines <= MAX_LINES, f"jobboard_dict is {lines} lines"


BLOCK = re.compile(r"(?:<!-- snippet: (?P<marker>.*?) -->\n)?```(?P<language>\w+)\n(?P<code>.*?)```", re.DOTALL)
EXCERPT = re.compile(r"not runnable: excerpt of (?P<path>\S+), run by (?P<test>tests/[\w/]+\.py)$")


def lines_not_in(code: str, path: Path) -> list[str]:
    source = {line.strip() for line in path.read_text(encoding="utf-8").splitlines()}
    return [line for line in code.splitlines() if line.strip() not in source | {"", "..."}]


def test_every_excerpt_in_the_page_is_made_of_lines_a_test_runs() -> None:
    """A python block of docs/writing-a-backend.md is a program tests/docs/test_snippets.py runs, or an excerpt
    (with its imports) of a file that the test it names runs: the dict:// backend or this file (run here), or
    the memory:// backend (run by its conformance suite). A toml block is the dict:// distribution's."""
    excerpts = 0
    for block in BLOCK.finditer(PAGE.read_text(encoding="utf-8")):
        if block["language"] == "toml":
            assert lines_not_in(block["code"], DISTRIBUTION / "pyproject.toml") == []
        if block["language"] != "python" or block["marker"] is None:
            continue
        marker = EXCERPT.match(block["marker"])
        assert marker is not None, block["marker"]
        test = (ROOT / marker["test"]).read_text(encoding="utf-8")
        package = Path(marker["path"]).parent.name
        assert marker["path"] == marker["test"] or f"from {package}" in test, (marker["test"], package)
        assert lines_not_in(block["code"], ROOT / marker["path"]) == [], marker["path"]
        excerpts += 1
    assert excerpts >= 8
