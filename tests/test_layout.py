"""The layout docs/architecture.md describes, checked from the source (ast, nothing imported):

- no import circles among the modules of ``jobboard/`` and of each in-tree backend;
- no import runs back up: ``jobboard/`` never imports a backend, and a backend imports only the layer below it
  (``jobboard.backend``, ``jobboard.job``, ``jobboard.errors``, ``jobboard.board.*``), whose modules import
  nothing above them;
- no module under ``jobboard/`` carries a folder's name as a prefix (``worker_job.py``: a folder never made);
- the tests are mirrored by area: every test module but this one lives in its area's folder, and none
  repeats its folder's name (``tests/test_redis_failover.py`` is ``tests/backends/redis/test_failover.py``);
- no function of a backend repeats the public ``post`` signature;
- docs/architecture.md gives every module one line;
- the trace of one job from ``post`` through a worker to ``consume`` on memory:// is the list the page gives.

An import counts wherever it is written (a function's lazy import runs too), except under ``if TYPE_CHECKING:``
(never run). ``from package import name`` of a lazily exporting package counts as an import of the module the
name comes from.
"""

from __future__ import annotations

import ast
import asyncio
import functools
import json
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "jobboard"
BACKENDS = ROOT / "backends"
PAGE = ROOT / "docs" / "architecture.md"
BELOW_BACKENDS = ("jobboard.backend", "jobboard.job", "jobboard.errors", "jobboard.board")
"""What a backend may import from jobboard (``jobboard.board`` and its modules)."""


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    exports: dict[str, str] = field(default_factory=dict)
    """For a package: name -> the module it comes from (its ``from M import name`` lines, lazy ones included)."""


def within(name: str, packages: tuple[str, ...]) -> bool:
    """``name`` is one of ``packages`` or a module inside one."""
    return any(name == package or name.startswith(f"{package}.") for package in packages)


def module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def source_modules() -> dict[str, Module]:
    """Every module of jobboard/ and of the in-tree backend packages, by dotted name."""
    found: dict[str, Module] = {}
    roots = [(PACKAGE, ROOT)] + [(package, package.parent) for package in sorted(BACKENDS.glob("*/jobboard_*"))]
    for package, base in roots:
        for path in sorted(package.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            found[module_name(path, base)] = Module(module_name(path, base), path, tree)
    for module in found.values():
        if module.path.name == "__init__.py":
            module.exports = {alias.asname or alias.name: absolute(module, node) for node in ast.walk(module.tree)
                              if isinstance(node, ast.ImportFrom) for alias in node.names}
    return found


def run_time_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement except those under ``if TYPE_CHECKING:``."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def absolute(module: Module, node: ast.ImportFrom) -> str:
    """The module ``node`` imports from, relative imports resolved."""
    if node.level == 0:
        return node.module or ""
    package = module.name if module.path.name == "__init__.py" else module.name.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def imported(module: Module, modules: dict[str, Module]) -> set[str]:
    """The modules (of ``modules``) that ``module`` imports when it runs."""
    targets: set[str] = set()
    for node in run_time_imports(module.tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        origin = absolute(module, node)
        for alias in node.names:
            target = f"{origin}.{alias.name}"
            if target not in modules:
                package = modules.get(origin)
                target = package.exports.get(alias.name, origin) if package else origin
            targets.add(target)
    return {target for target in targets if target in modules and target != module.name}


@functools.cache
def import_graph() -> dict[str, set[str]]:
    modules = source_modules()
    return {name: imported(module, modules) for name, module in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while (member := stack.pop()) != node:
                component.append(member)
            if component:
                found.append(sorted([node, *component]))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circles() -> None:
    assert cycles(import_graph()) == []


def test_jobboard_never_imports_a_backend() -> None:
    graph = import_graph()
    upward = {name: sorted(t for t in targets if t.startswith("jobboard_"))
              for name, targets in graph.items() if name.split(".")[0] == "jobboard"}
    assert {name: targets for name, targets in upward.items() if targets} == {}


def test_backends_import_only_the_layer_below_them() -> None:
    graph = import_graph()
    wrong = {name: sorted(t for t in targets if within(t, ("jobboard",)) and not within(t, BELOW_BACKENDS))
             for name, targets in graph.items() if name.startswith("jobboard_")}
    assert {name: targets for name, targets in wrong.items() if targets} == {}


def test_the_layer_below_the_backends_imports_nothing_above_it() -> None:
    graph = import_graph()
    below = [name for name in graph if within(name, BELOW_BACKENDS)]
    assert len(below) > 10, below
    wrong = {name: sorted(t for t in graph[name] if not within(t, (*BELOW_BACKENDS, "jobboard._exports")))
             for name in below}
    assert {name: targets for name, targets in wrong.items() if targets} == {}


def test_no_module_name_carries_a_folders_name_as_a_prefix() -> None:
    folders = {path.name for path in PACKAGE.rglob("*") if path.is_dir() and (path / "__init__.py").exists()}
    prefixed = [str(path.relative_to(ROOT)) for path in PACKAGE.rglob("*.py")
                if any(path.stem.lstrip("_").startswith(f"{folder}_") for folder in folders)]
    assert prefixed == []


TESTS = ROOT / "tests"


def test_the_tests_are_mirrored_by_area() -> None:
    loose = sorted(path.name for path in TESTS.glob("test_*.py") if path.name != "test_layout.py")
    repeating = sorted(str(path.relative_to(TESTS)) for path in TESTS.rglob("test_*.py")
                       if path.stem.startswith(f"test_{path.parent.name}_"))
    assert (loose, repeating) == ([], [])


POST_KEYWORDS = {"details", "priority", "depends_on", "max_attempts", "keep_result", "key", "delay", "not_before",
                 "result_ttl", "trash_ttl", "connection"}
"""The keywords of the public ``JobBoard.post``."""


def test_no_backend_repeats_the_public_post_signature() -> None:
    """A backend receives a ``Prepared`` posting: no function of a backend takes four or more of ``post``'s keywords."""
    repeated = []
    for name, module in source_modules().items():
        if name.startswith("jobboard_"):
            for node in ast.walk(module.tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    arguments = {arg.arg for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]}
                    if len(arguments & POST_KEYWORDS) >= 4:
                        repeated.append(f"{name}.{node.name}")
    assert repeated == []


def test_the_page_gives_every_module_one_line() -> None:
    """Each module of jobboard/ and of each in-tree backend has its row in docs/architecture.md, and no row
    names a module that is gone."""
    text = PAGE.read_text(encoding="utf-8")
    section = text[text.index("\n## Modules\n"):text.index("\n## ", text.index("\n## Modules\n") + 1)]
    described = set(re.findall(r"^\| `((?:jobboard|backends)/[\w/]+\.py)` \| .{10,} \|$", section, re.MULTILINE))
    modules = {str(module.path.relative_to(ROOT)) for module in source_modules().values()}
    assert (sorted(modules - described), sorted(described - modules)) == ([], [])


# -- the trace of one job --------------------------------------------------------------------------


def files_run(url: str) -> list[str]:
    """:func:`trace_here`, in a fresh interpreter: what this one imported for other tests (OpenTelemetry,
    which makes a post look for a trace context to carry) does not change the trace."""
    program = "import json, sys; from tests.test_layout import trace_here; print(json.dumps(trace_here(sys.argv[1])))"
    done = subprocess.run([sys.executable, "-c", program, url], cwd=ROOT, capture_output=True, text=True,
                          timeout=50, check=False)
    assert done.returncode == 0, done.stderr
    traced: list[str] = json.loads(done.stdout.splitlines()[-1])
    return traced


def trace_here(url: str) -> list[str]:
    """The files of jobboard/ and backends/ whose functions run while one job goes from ``board.post`` to its
    consume by a worker already running (idle in ``board.wait()``). A first job warms every path up, so no
    import is counted."""
    from jobboard import Worker, WorkerConfig, open_board

    seen: set[str] = set()

    def record(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith((str(PACKAGE), str(BACKENDS))):
            seen.add(frame.f_code.co_filename)

    async def handler(ctx: object) -> dict[str, int]:
        return {"ok": 1}

    async def one_job(board: Any, traced: bool) -> None:
        worker = Worker(board, handler, WorkerConfig())
        async with asyncio.TaskGroup() as group:
            group.create_task(worker.run())
            await worker.started.wait()
            await asyncio.sleep(0.3)  # the worker is idle in board.wait()
            if traced:
                sys.setprofile(record)
                threading.setprofile(record)
            try:
                await board.post("resize", {"width": 64})
                for _ in range(20_000):  # polled: a subscription or a waiter would add to the trace
                    if worker.stats.consumed:
                        break
                    await asyncio.sleep(0.001)
            finally:
                sys.setprofile(None)
                threading.setprofile(None)
                worker.stop()

    async def main() -> None:
        async with asyncio.timeout(30), open_board(url) as board:
            await one_job(board, traced=False)
            await one_job(board, traced=True)
            assert await board.job_count() == 0

    asyncio.run(main())
    return sorted(str(Path(path).relative_to(ROOT)) for path in seen)


def traced_in_page(scheme: str) -> list[str]:
    """The files docs/architecture.md lists for ``scheme`` under its trace (``<!-- trace: scheme -->``)."""
    text = PAGE.read_text(encoding="utf-8")
    block = re.search(rf"<!-- trace: {scheme} -->\n(.*?)\n<!-- /trace -->", text, re.DOTALL)
    assert block is not None, f"no trace for {scheme}:// in {PAGE.name}"
    return sorted(re.findall(r"`((?:jobboard|backends)/[\w/]+\.py)`", block[1]))


def test_the_trace_on_memory_is_the_one_the_page_gives() -> None:
    assert files_run(f"memory://trace-{uuid.uuid4().hex}") == traced_in_page("memory")


@pytest.mark.timeout(60)
def test_the_trace_on_zookeeper_is_the_one_the_page_gives(zk_hosts: str) -> None:
    assert files_run(f"zookeeper://{zk_hosts}/trace/{uuid.uuid4().hex}") == traced_in_page("zookeeper")


def test_every_serial_file_of_the_parallel_suite_exists() -> None:
    """tests/conftest.py's SERIAL_FILES (run one after another when the suite runs on 2 workers) names files
    that exist: a fault test renamed or moved would otherwise run beside the others unnoticed."""
    from tests.conftest import SERIAL_FILES

    assert sorted(path for path in SERIAL_FILES if not (ROOT / path).is_file()) == []
