"""Board URLs, URL options, backend lookup and error translation."""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import anyio
import pytest

import jobboard.board.registry
from jobboard.board.registry import installed_schemes, open_board
from jobboard.board.url import (
    BoardURL,
    non_negative_float,
    parse_options,
    parse_url,
    positive_float,
    positive_int,
)
from jobboard.errors import (
    BackendNotFound,
    BackendUnavailable,
    InvalidJob,
    InvalidURL,
    JobBoardError,
    JobNotFound,
    translate_errors,
)

# -- parse_url --------------------------------------------------------------


def test_several_hosts_path_and_query() -> None:
    url = parse_url("zookeeper://h1:2181,h2:2182/a/b?x=1&flag=")
    assert url == BoardURL("zookeeper", ("h1:2181", "h2:2182"), "/a/b", {"x": "1", "flag": ""})
    assert url.host_string == "h1:2181,h2:2182"


def test_user_and_password() -> None:
    url = parse_url("zookeeper://alice:s%40cret@h1:2181,h2/jobs")
    assert (url.username, url.password, url.hosts, url.path) == ("alice", "s@cret", ("h1:2181", "h2"), "/jobs")


def test_user_without_password() -> None:
    url = parse_url("zookeeper://alice@h1")
    assert (url.username, url.password, url.hosts) == ("alice", None, ("h1",))


def test_scheme_is_lowercased_and_hosts_may_be_absent() -> None:
    assert parse_url("MEMORY://") == BoardURL("memory")
    assert parse_url("memory://name").hosts == ("name",)


@pytest.mark.parametrize("text", ["localhost:2181/jobs", "memory:/x", "", "memory"])
def test_missing_scheme_is_invalid(text: str) -> None:
    with pytest.raises(InvalidURL, match="scheme://"):
        parse_url(text)


def test_empty_scheme_is_invalid() -> None:
    with pytest.raises(InvalidURL):
        parse_url("://h1:2181/jobs")


def test_duplicate_query_key_is_invalid() -> None:
    with pytest.raises(InvalidURL, match="twice"):
        parse_url("memory://x?max_attempts=1&max_attempts=2")


# -- options ----------------------------------------------------------------

CONVERTERS = {"retries": positive_int, "timeout": positive_float, "retention": non_negative_float}


def test_parse_options_converts_by_type() -> None:
    url = parse_url("zookeeper://h/p?retries=3&timeout=0.5&retention=0")
    assert parse_options(url, CONVERTERS) == {"retries": 3, "timeout": 0.5, "retention": 0.0}


def test_parse_options_unknown_key_lists_known_ones() -> None:
    with pytest.raises(InvalidURL) as caught:
        parse_options(parse_url("zookeeper://h/p?retires=3&colour=red"), CONVERTERS)
    message = str(caught.value)
    assert "colour, retires" in message and "known: retention, retries, timeout" in message


@pytest.mark.parametrize("query", ["retries=0", "retries=three", "timeout=-1", "timeout=nan", "retention=-1"])
def test_parse_options_bad_value_is_invalid(query: str) -> None:
    key, _, value = query.partition("=")
    with pytest.raises(InvalidURL, match=f"option {key}={value!r}"):
        parse_options(parse_url(f"zookeeper://h/p?{query}"), CONVERTERS)


# -- open_board -------------------------------------------------------------


def test_installed_schemes_include_the_in_tree_backends() -> None:
    assert {"memory", "redis", "rediss", "zookeeper"} <= set(installed_schemes())


def test_unknown_scheme_lists_installed_schemes() -> None:
    with pytest.raises(BackendNotFound) as caught:
        open_board("nosuch://x")
    installed = str(caught.value).split("installed: ", 1)[1].rstrip(")").split(", ")
    assert "nosuch://" in str(caught.value) and installed == sorted(installed)
    assert {"memory", "redis", "rediss", "zookeeper"} <= set(installed)


def test_memory_backend_unknown_option_is_invalid_url() -> None:
    with pytest.raises(InvalidURL, match="known: key_retention, max_attempts, max_posting_bytes"):
        open_board("memory://x?max_attempt=3")


def test_memory_backend_bad_option_value_is_invalid_url() -> None:
    with pytest.raises(InvalidURL, match="max_posting_bytes"):
        open_board("memory://x?max_posting_bytes=-5")


async def test_memory_backend_options_take_effect() -> None:
    with anyio.fail_after(5):
        async with open_board("memory://?max_posting_bytes=200&max_attempts=2") as board:
            assert (await board.post("small")).max_attempts == 2
            with pytest.raises(InvalidJob, match="limit of 200 bytes"):
                await board.post("big", {"blob": "x" * 300})
            assert await board.job_count() == 1


def test_a_distribution_installed_or_removed_while_running_is_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The registry keeps its scan of the entry points only while no directory on ``sys.path`` changed: a
    dist-info written into (then removed from) a directory already on it is seen at the next lookup."""
    from tests.backends.test_third_party import write_dist_info

    monkeypatch.syspath_prepend(str(tmp_path))
    assert "dict" not in installed_schemes()
    info = write_dist_info(tmp_path)
    assert "dict" in installed_schemes()
    shutil.rmtree(info)
    assert "dict" not in installed_schemes()


def fake_entry_points(*entries: EntryPoint) -> object:
    def entry_points(*, group: str) -> list[EntryPoint]:
        return [entry for entry in entries if entry.group == group]

    return entry_points


@pytest.mark.parametrize(("url", "library", "extra"), [
    ("rediss://127.0.0.1:6380/0/jobs", "hiredis", "redis"), ("redis://127.0.0.1:6379/0/jobs", "hiredis", "redis"),
    ("zookeeper://127.0.0.1:2181/jobs", "aiozk", "zookeeper"),
])
def test_a_backend_without_its_client_library_names_the_extra_that_installs_it(
    url: str, library: str, extra: str,
) -> None:
    """The extra is the backend package's, not the scheme's: there is no ``jobboard[rediss]``."""
    program = (f"import sys; sys.modules[{library!r}] = None  # as if not installed\n"
               "from jobboard import BackendNotFound, open_board\n"
               f"try:\n    open_board({url!r})\nexcept BackendNotFound as error:\n"
               "    print(error, '| caused by ImportError:', isinstance(error.__cause__, ImportError))\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=30, check=True)
    assert library in done.stdout and done.stdout.rstrip().endswith("| caused by ImportError: True"), done.stdout + done.stderr
    assert f"pip install 'jobboard[{extra}]' to install what it needs" in done.stdout, done.stdout


def test_a_backend_module_that_cannot_be_imported_asks_for_a_reinstall(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = EntryPoint(name="zookeeper", value="module_that_does_not_exist_xyz:Board",
                        group="jobboard.backends")
    monkeypatch.setattr(jobboard.board.registry, "entry_points", fake_entry_points(broken))
    with pytest.raises(BackendNotFound) as caught:
        open_board("zookeeper://h1:2181/jobs")
    assert "reinstall jobboard" in str(caught.value) and "pip install" not in str(caught.value)
    assert "module_that_does_not_exist_xyz" in str(caught.value)
    assert isinstance(caught.value.__cause__, ImportError)


def test_no_backends_installed_says_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobboard.board.registry, "entry_points", fake_entry_points())
    with pytest.raises(BackendNotFound, match=r"installed: none"):
        open_board("memory://x")


def test_backend_missing_its_attribute_is_backend_not_found(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = EntryPoint(name="memory", value="jobboard:NoSuchBoard", group="jobboard.backends")
    monkeypatch.setattr(jobboard.board.registry, "entry_points", fake_entry_points(broken))
    with pytest.raises(BackendNotFound):
        open_board("memory://x")


# -- translate_errors -------------------------------------------------------


def map_native(error: BaseException) -> JobBoardError | None:
    if isinstance(error, ConnectionError):
        return BackendUnavailable(f"connection lost: {error}")
    return None


def test_translate_errors_maps_a_native_error_keeping_the_cause() -> None:
    native = ConnectionResetError("peer reset")
    expected = pytest.raises(BackendUnavailable, match="connection lost: peer reset")
    with expected as caught, translate_errors(map_native):
        raise native
    assert caught.value.__cause__ is native


def test_translate_errors_lets_jobboard_errors_through_unmapped() -> None:
    calls: list[BaseException] = []

    def recording(error: BaseException) -> JobBoardError | None:
        calls.append(error)
        return BackendUnavailable("should not be used")

    original = JobNotFound("job-1 is not on the board")
    with pytest.raises(JobNotFound) as caught, translate_errors(recording):
        raise original
    assert caught.value is original and calls == []


def test_translate_errors_lets_unmapped_natives_through() -> None:
    original = KeyError("x")
    with pytest.raises(KeyError) as caught, translate_errors(map_native):
        raise original
    assert caught.value is original


def test_translate_errors_is_silent_without_an_error() -> None:
    with translate_errors(map_native):
        result = 1 + 1
    assert result == 2


@pytest.mark.parametrize("url", ["sqlite:///tmp/x.db?board=t1?create=0", "sqlite:///tmp/x.db?board=a=b",
                                 "postgresql://u@h/db?board=shop?session_timeout=3", "postgresql://u@h/db?board=a%26b"])
def test_a_board_name_with_a_urls_separator_is_refused(url: str) -> None:
    """``?board=t1?create=0`` (``?`` for ``&``) named a board ``t1?create=0``, made anew by the first post: a
    worker of ``t1`` never saw its jobs. A board name holds none of ``?``, ``&``, ``=``, ``#``."""
    with pytest.raises(InvalidURL, match="options are joined with &"):
        open_board(url)
