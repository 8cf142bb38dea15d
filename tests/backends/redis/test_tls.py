"""rediss://: a board over TLS (Debian's redis-server serves TLS with --tls-port), and the
refusal of a server too old for the board's functions."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from jobboard import JobBoardError, JobState, open_board
from jobboard_redis.learned import check_version
from tests.support import zkserver
from tests.support.redisserver import RedisServer

pytestmark = pytest.mark.timeout(60)


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1 signed by it: (ca, cert, key)."""
    ca, ca_key = directory / "ca.crt", directory / "ca.key"
    cert, key, request = directory / "server.crt", directory / "server.key", directory / "server.csr"
    extensions = directory / "san.ext"
    extensions.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for command in (
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=jobboard test CA",
         "-keyout", str(ca_key), "-out", str(ca)],
        ["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(request)],
        ["x509", "-req", "-in", str(request), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
         "-days", "1", "-extfile", str(extensions), "-out", str(cert)],
    ):
        subprocess.run(["openssl", *command], check=True, capture_output=True, timeout=30)
    return ca, cert, key


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[RedisServer, int, Path]]:
    """A Redis serving TLS on its own port (and plain text on another, for the harness' ping)."""
    ca, cert, key = make_certificates(tmp_path)
    tls_port = zkserver.free_port()
    extra = ["--tls-port", str(tls_port), "--tls-cert-file", str(cert), "--tls-key-file", str(key),
             "--tls-ca-cert-file", str(ca), "--tls-auth-clients", "no"]
    with RedisServer(extra=extra) as server:
        yield server, tls_port, ca


async def test_a_board_over_tls_posts_claims_and_consumes(
        tls_server: tuple[RedisServer, int, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    _, port, ca = tls_server
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))  # the client trusts the test CA (default context)
    url = f"rediss://127.0.0.1:{port}/0/tls-{uuid.uuid4().hex}?session_timeout=5"
    with anyio.fail_after(30):
        async with open_board(url) as board, open_board(url) as other:
            job = await board.post("tls", {"n": 1})
            assert [found.id for found in await other.wait()] == [job.id]
            claim = await other.claim_next("me")
            assert claim is not None and claim.job.details == {"n": 1}
            await other.consume(claim, "done")
            assert await board.state(job) is JobState.COMPLETE


async def test_an_untrusted_tls_server_is_an_error_within_the_window(
        tls_server: tuple[RedisServer, int, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    _, port, _ = tls_server
    monkeypatch.setenv("SSL_CERT_FILE", "/nonexistent")  # the test CA is not trusted
    url = f"rediss://127.0.0.1:{port}/0/tls-{uuid.uuid4().hex}?session_timeout=5&connect_timeout=1"
    with anyio.fail_after(30), pytest.raises(JobBoardError, match="CERTIFICATE_VERIFY_FAILED") as caught:
        async with open_board(url):
            pass
    assert "\n" not in str(caught.value)


def test_a_server_older_than_7_is_refused_with_one_line() -> None:
    with pytest.raises(JobBoardError, match=r"Redis 6\.2\.14 is too old .* 7\.0 or newer"):
        check_version("6.2.14")
    check_version("7.0.15")
    check_version("7.2.4")
