"""docs/metrics.md: its programs run and print what it shows; the Grafana dashboard is valid and
queries only metrics that jobboard exports; the tables list exactly those metrics."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import anyio
import pytest

pytest.importorskip("prometheus_client", reason="the metrics extra is not installed")
pytest.importorskip("opentelemetry.sdk", reason="the otel extra (and opentelemetry-sdk) is not installed")

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jobboard import open_board
from jobboard.observe.live import LiveBoard
from jobboard.observe.metrics import BoardCollector, WorkerMetrics
from jobboard.worker.conductor import Worker, WorkerConfig
from jobboard.worker.handlers import Handlers
from tests.support.docs_programs import blocks, check_program
from tests.support.docs_programs import programs as docs_programs

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "metrics.md"
DASHBOARD = ROOT / "docs" / "grafana-dashboard.json"
SUFFIXES = ("_bucket", "_count", "_sum")


def programs() -> list[tuple[str, str]]:
    return [(program, output) for program, output in docs_programs(GUIDE) if output]


def test_every_program_has_its_output() -> None:
    assert len(programs()) == sum(language == "python" for language, _ in blocks(GUIDE)) == 3


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("program", "output"), programs(), ids=[f"block-{n}" for n in range(len(programs()))])
def test_program_runs_and_prints_its_output(program: str, output: str, tmp_path: Path) -> None:
    check_program(program, output, tmp_path)


async def exported() -> set[str]:
    """The names of every metric family in a worker's and a board's exposition."""
    handlers = Handlers()
    handlers.register("x", lambda ctx: None)
    worker_metrics, board_registry = WorkerMetrics(), CollectorRegistry()
    async with open_board(f"memory://exported-{uuid.uuid4().hex}") as board:
        await board.post("x")
        worker = Worker(board, handlers, WorkerConfig(burst=True), middleware=[worker_metrics.middleware])
        worker_metrics.watch(worker)
        with anyio.fail_after(20):
            await worker.run()
            await board.register_entity("w")
            async with LiveBoard(board) as live:
                board_registry.register(BoardCollector(live))
                text = generate_latest(worker_metrics.registry) + generate_latest(board_registry)
    return {family.name + ("_total" if family.type == "counter" else "")
            for family in text_string_to_metric_families(text.decode())
            if not family.name.endswith("_created")}  # prometheus_client's creation times of the counters


def test_the_tables_list_exactly_the_exported_metrics() -> None:
    documented = set(re.findall(r"^\| `(jobboard_[a-z_]+)`", GUIDE.read_text(encoding="utf-8"), re.MULTILINE))
    assert documented == anyio.run(exported)


def test_the_grafana_dashboard_is_valid_and_queries_exported_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert dashboard["title"] and dashboard["uid"] and isinstance(dashboard["schemaVersion"], int)
    assert [v["type"] for v in dashboard["templating"]["list"]] == ["datasource"]
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels)
    names = anyio.run(exported)
    queried = set()
    for panel in panels:
        assert set(panel["gridPos"]) == {"x", "y", "w", "h"} and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["type"] in ("timeseries", "stat") and panel["targets"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        for target in panel["targets"]:
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]
            for name in re.findall(r"\bjobboard_[a-z_]+", target["expr"]):
                base = next((name.removesuffix(s) for s in SUFFIXES if name.endswith(s)), name)
                assert name in names or base in names, f"{panel['title']}: {name} is not exported"
                queried.add(base if base in names else name)
    assert queried == names, f"metrics without a panel: {sorted(names - queried)}"
