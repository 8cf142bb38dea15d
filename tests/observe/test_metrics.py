"""jobboard[metrics]: a worker's metrics and a board's gauges, scraped over HTTP and parsed with
prometheus_client's own parser. The CLI runs as real processes on a real ZooKeeper."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping

import anyio
import pytest

pytest.importorskip("prometheus_client", reason="the metrics extra is not installed")

from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jobboard import open_board
from jobboard.board.contract import JobBoard
from jobboard.job import Job
from jobboard.observe.metrics import WorkerMetrics
from jobboard.worker.conductor import Worker, WorkerConfig
from jobboard.worker.handlers import Handlers, JobContext
from jobboard.wrappers.faulty import FaultyBoard
from tests.support.redisserver import RedisServer

pytestmark = pytest.mark.timeout(90)

HANDLERS = "tests.support.cli_handlers:handlers"
Samples = Mapping[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample by (name, labels)."""
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(samples: Samples, metric: str, **labels: str) -> float | None:
    return samples.get((metric, frozenset(labels.items())))


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200 and response.headers["Content-Type"].startswith("text/plain")
        return parse(response.read().decode())


async def scrape_until(url: str, ready: Callable[[Samples], bool], seconds: float = 20) -> Samples:
    """Scrape until ``ready`` holds (the worker counts an outcome just after its settle is applied)."""
    with anyio.fail_after(seconds):
        while True:
            samples = await anyio.to_thread.run_sync(scrape, url)
            if ready(samples):
                return samples
            await anyio.sleep(0.1)


async def start(*args: str) -> tuple[asyncio.subprocess.Process, list[str]]:
    """``python -m jobboard args...``, and its first lines up to the one giving the metrics URL."""
    child = await asyncio.create_subprocess_exec(sys.executable, "-m", "jobboard", *args,
                                                 stdout=asyncio.subprocess.PIPE)
    assert child.stdout is not None
    lines: list[str] = []
    with anyio.fail_after(30):
        while not lines or not lines[-1].startswith("metrics: "):
            line = (await child.stdout.readline()).decode()
            assert line, f"exited before serving metrics: {lines}"
            lines.append(line.strip())
    return child, lines


async def stop(child: asyncio.subprocess.Process) -> None:
    child.send_signal(signal.SIGTERM)
    with anyio.fail_after(30):
        assert await child.wait() == 0


async def test_a_worker_process_serves_its_metrics(zk_hosts: str) -> None:
    url = f"zookeeper://{zk_hosts}/metrics-worker/{uuid.uuid4().hex}"
    child, lines = await start("worker", url, "--handlers", HANDLERS, "--owner", "m1", "--metrics-port", "0")
    try:
        assert lines[0].startswith("worker m1 on ") and lines[1].startswith("metrics: http://127.0.0.1:")
        endpoint = lines[1].removeprefix("metrics: ")
        with anyio.fail_after(30):
            async with open_board(url) as board:
                jobs = [await board.post("echo", {"n": n}) for n in range(3)]
                jobs.append(await board.post("fail"))  # 2 attempts (its policy), then the trash
                for job in jobs:
                    await board.wait_for_completion(job)
        samples = await scrape_until(endpoint, lambda s: value(s, "jobboard_worker_jobs_total", outcome="failed") == 1)
    finally:
        await stop(child)
    expected = {
        ("jobboard_worker_jobs_started_total", ("name", "echo")): 3,
        ("jobboard_worker_jobs_started_total", ("name", "fail")): 2,
        ("jobboard_worker_jobs_in_flight", ("name", "echo")): 0,
        ("jobboard_worker_claims_total", None): 5,
        ("jobboard_worker_claim_losses_total", None): 0,
        ("jobboard_worker_backend_errors_total", None): 0,
        ("jobboard_worker_concurrency", None): 1,
    }
    for (metric, label), count in expected.items():
        labels = dict([label]) if label else {}
        assert value(samples, metric, **labels) == count, (metric, labels)
    for outcome, count in {"consumed": 3, "retried": 1, "failed": 1, "lost": 0, "cancelled": 0}.items():
        assert value(samples, "jobboard_worker_jobs_total", outcome=outcome) == count, outcome
    assert value(samples, "jobboard_worker_jobs_finished_total", name="echo", result="ok") == 3
    assert value(samples, "jobboard_worker_jobs_finished_total", name="fail", result="error") == 2
    assert value(samples, "jobboard_worker_job_duration_seconds_count", name="echo", result="ok") == 3
    assert value(samples, "jobboard_worker_job_duration_seconds_bucket", name="echo", result="ok", le="+Inf") == 3
    assert value(samples, "jobboard_worker_job_attempt_sum", name="fail") == 1 + 2
    assert value(samples, "jobboard_worker_job_attempt_bucket", name="fail", le="1.0") == 1


class RacingBoard(FaultyBoard):
    """No faults; the first time ``wait()`` offers a job, another claimer takes it first."""

    def __init__(self, inner: JobBoard) -> None:
        super().__init__(inner, seed=0, rate=0.0)
        self.raced: Job | None = None
        self.waiting = anyio.Event()

    async def wait(self, *, names: object = None) -> list[Job]:
        self.waiting.set()
        jobs = await self.inner.wait()
        if self.raced is None:
            self.raced = jobs[0]
            await self.inner.claim(jobs[0], "a-faster-worker")
        return jobs


async def test_a_claim_race_lost_is_counted() -> None:
    """The board offered a job, another claimer got it first: the worker's claim finds nothing."""
    handlers = Handlers()
    handlers.register("work", lambda ctx: None)
    metrics = WorkerMetrics()
    with anyio.fail_after(20):
        async with open_board(f"memory://races-{uuid.uuid4().hex}") as inner:
            board = RacingBoard(inner)
            await board.open()
            worker = Worker(board, handlers, WorkerConfig(idle_backoff_max=0.5), middleware=[metrics.middleware])
            metrics.watch(worker)
            async with anyio.create_task_group() as group:
                group.start_soon(worker.run)
                await board.waiting.wait()  # the worker found nothing and waits on the board
                await inner.post("work")
                while True:
                    if worker.stats.claim_races:
                        break
                    await anyio.sleep(0.02)
                worker.stop()
    samples = parse(generate_latest(metrics.registry).decode())
    assert worker.stats.claim_races == 1 and worker.stats.claimed == 0
    assert value(samples, "jobboard_worker_claim_races_total") == 1
    assert value(samples, "jobboard_worker_claims_total") == 0


async def test_middleware_results_by_handler_outcome() -> None:
    handlers = Handlers()

    @handlers.register("flaky")
    async def flaky(ctx: JobContext) -> None:
        from jobboard.worker.retry import Fail, Retry

        if ctx.details["how"] == "retry" and ctx.attempt == 1:
            raise Retry(0.01)
        if ctx.details["how"] == "fail":
            raise Fail("no")

    metrics = WorkerMetrics()
    async with open_board(f"memory://results-{uuid.uuid4().hex}") as board:
        for how in ("retry", "fail", "ok"):
            await board.post("flaky", {"how": how})
        worker = Worker(board, handlers, WorkerConfig(burst=True), middleware=[metrics.middleware])
        metrics.watch(worker)
        with anyio.fail_after(20):
            await worker.run()
    samples = parse(generate_latest(metrics.registry).decode())
    for result, count in {"ok": 2, "retry": 1, "fail": 1}.items():
        assert value(samples, "jobboard_worker_jobs_finished_total", name="flaky", result=result) == count
    assert value(samples, "jobboard_worker_jobs_total", outcome="consumed") == 2


def test_a_metrics_port_in_use_is_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "jobboard", "worker", f"memory://{uuid.uuid4().hex}",
                                 "--handlers", HANDLERS, "--metrics-port", str(port)],
                                capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"jobboard: error: cannot serve metrics on 127.0.0.1:{port}: Address already in use")


@pytest.mark.parametrize(("args", "extra"), [
    (["worker", "--handlers", HANDLERS, "--metrics-port", "0"], "metrics"),
    (["worker", "--handlers", HANDLERS, "--trace"], "otel"),
    (["metrics", "--port", "0"], "metrics"),
])
def test_a_missing_extra_is_named(args: list[str], extra: str) -> None:
    """Without the package (hidden here), one line names the extra to install."""
    hide = "import sys; sys.modules['prometheus_client'] = sys.modules['opentelemetry'] = None; "
    run = f"from jobboard.cli import main; sys.exit(main({['--board', 'memory://x', *args]!r}))"
    result = subprocess.run([sys.executable, "-c", hide + run], capture_output=True, text=True, timeout=30,
                            check=False)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().endswith(f"pip install 'jobboard[{extra}]'"), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr


class Broken:
    def __init__(self) -> None:
        self.calls = 0

    def collect(self) -> list[object]:
        self.calls += 1
        raise RuntimeError(f"collector broken ({self.calls})")


def test_the_endpoint_answers_404_and_500_and_keeps_serving(caplog: pytest.LogCaptureFixture) -> None:
    """Only /metrics is served; a failing collector is a 500 for that scrape, never a dead endpoint."""
    async def main() -> None:
        from prometheus_client import CollectorRegistry

        from jobboard.observe.metrics import bind_metrics, bound_port, serve_metrics

        registry, broken = CollectorRegistry(), Broken()
        registry.register(broken)  # type: ignore[arg-type]
        async with anyio.create_task_group() as group:
            listener = await bind_metrics("127.0.0.1", 0)
            port = bound_port(listener)
            group.start_soon(serve_metrics, registry, listener)
            for path, code in (("/other", 404), ("/metrics", 500), ("/metrics", 500)):
                with pytest.raises(urllib.error.HTTPError) as error:
                    await anyio.to_thread.run_sync(urllib.request.urlopen, f"http://127.0.0.1:{port}{path}")
                assert error.value.code == code
            group.cancel_scope.cancel()
        assert broken.calls == 2

    anyio.run(main)
    assert "collecting metrics failed" in caplog.text


async def test_jobboard_metrics_serves_the_board_s_gauges(zk_hosts: str) -> None:
    url = f"zookeeper://{zk_hosts}/metrics-board/{uuid.uuid4().hex}"
    async with open_board(url) as board:
        await board.register_entity("w1", {"pid": 1})
        running = await board.claim(await board.post("a"), "w1")
        await board.post("a")
        first = await board.post("b", priority="high")
        await board.post("d", depends_on=[first])
        await board.trash(await board.claim(await board.post("c"), "w1"), "bad input")
        child, lines = await start("metrics", url, "--port", "0")
        try:
            endpoint = lines[-1].removeprefix("metrics: ")
            samples = await anyio.to_thread.run_sync(scrape, endpoint)
            for state, count in {"unclaimed": 2, "claimed": 1, "waiting": 1}.items():
                assert value(samples, "jobboard_board_jobs", state=state) == count, state
            for (name, state), count in {("a", "unclaimed"): 1, ("a", "claimed"): 1, ("b", "unclaimed"): 1,
                                         ("d", "waiting"): 1}.items():
                assert value(samples, "jobboard_board_jobs_by_name", name=name, state=state) == count
            assert value(samples, "jobboard_board_jobs_by_priority", priority="normal") == 3
            assert value(samples, "jobboard_board_jobs_by_priority", priority="high") == 1
            assert value(samples, "jobboard_board_trash_jobs") == 1
            assert value(samples, "jobboard_board_workers") == 1
            assert value(samples, "jobboard_board_worker_running_jobs", worker="w1") == 1
            assert (value(samples, "jobboard_board_oldest_unclaimed_age_seconds") or 0) > 0
            assert value(samples, "jobboard_board_up") == 1
            await board.consume(running)  # the live view follows the board's events
            await board.post("a")
            samples = await scrape_until(endpoint, lambda s: value(s, "jobboard_board_jobs", state="claimed") == 0
                                         and value(s, "jobboard_board_jobs", state="unclaimed") == 3)
            assert value(samples, "jobboard_board_jobs_by_name", name="a", state="unclaimed") == 2
            assert value(samples, "jobboard_board_worker_running_jobs", worker="w1") == 0
        finally:
            await stop(child)


async def test_the_board_s_gauges_are_absent_while_the_board_is_down() -> None:
    """`jobboard metrics` kept exporting the last board gauges while `jobboard_board_up` was 0."""
    with RedisServer(appendonly=False) as server:
        child, lines = await start("metrics", server.url(f"/0/metrics-{uuid.uuid4().hex}") + "?session_timeout=4",
                                   "--port", "0")
        try:
            endpoint = lines[-1].removeprefix("metrics: ")
            samples = await anyio.to_thread.run_sync(scrape, endpoint)
            assert value(samples, "jobboard_board_up") == 1
            assert value(samples, "jobboard_board_jobs", state="unclaimed") == 0
            await anyio.to_thread.run_sync(server.kill)
            samples = await scrape_until(endpoint, lambda s: value(s, "jobboard_board_up") == 0, seconds=30)
            board_gauges = {name for name, _ in samples if name.startswith("jobboard_board_")}
            assert board_gauges == {"jobboard_board_up"}, board_gauges
            await anyio.to_thread.run_sync(server.start)
            await scrape_until(endpoint, lambda s: value(s, "jobboard_board_up") == 1
                               and value(s, "jobboard_board_jobs", state="unclaimed") == 0, seconds=30)
        finally:
            await stop(child)
