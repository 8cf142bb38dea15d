"""``jobboard dashboard`` stops on SIGTERM and SIGINT with exit status 0, as the worker and
``jobboard metrics`` do (uvicorn re-raised the signal after its graceful shutdown: exit -15)."""

from __future__ import annotations

import http.client
import re
import signal
import subprocess
import sys

import pytest

pytest.importorskip("uvicorn")


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_the_dashboard_stops_on_a_signal_with_exit_status_0(stop: signal.Signals) -> None:
    child = subprocess.Popen([sys.executable, "-m", "jobboard", "dashboard", "memory://signals", "--port", "0"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        said = child.stdout.readline()  # printed once the socket is bound
        address = re.search(r"http://127\.0\.0\.1:(\d+)/", said)
        assert address, said
        page = http.client.HTTPConnection("127.0.0.1", int(address[1]), timeout=20)
        page.request("GET", "/")
        assert page.getresponse().status == 200  # it serves: the signal comes to a running server
        stream = http.client.HTTPConnection("127.0.0.1", int(address[1]), timeout=20)
        stream.request("GET", "/events")  # a live stream open while it stops
        assert stream.getresponse().status == 200
        child.send_signal(stop)
        _, err = child.communicate(timeout=20)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, (child.returncode, err)
    assert "Traceback" not in err, err
