"""``parallel.dask_address`` is probed before the prepare flow builds its Dask task runner: within
seconds, one line naming the setting, its value and what is there. Before: nothing listening gave a
traceback after 30 s, a malformed address a traceback, and the address of a server that is not Dask
(an HTTP server) made prepare hang for ever."""

from __future__ import annotations

import asyncio
import http.server
import sys
import threading
import time

import pytest
import yaml

from benchmarks.toy import free_port
from pipeline.config.validation import SettingsError
from pipeline.io.dask_probe import PROBE_TIMEOUT_S, check_dask_address

pytest.importorskip("distributed", reason="optional extra [dask] not installed")

TIMEOUT = 2.0  # seconds per probe step in these tests (the flow's: PROBE_TIMEOUT_S)


@pytest.fixture
def http_server():
    """An HTTP server on loopback: it waits for a request line that Dask's handshake never ends."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def refusal(address, timeout: float = TIMEOUT) -> tuple[str, float]:
    started = time.monotonic()
    with pytest.raises(SettingsError) as err:
        check_dask_address(address, timeout=timeout)
    return str(err.value), time.monotonic() - started


def test_nothing_listening_is_refused_at_once():
    address = f"tcp://127.0.0.1:{free_port()}"
    message, took = refusal(address)
    assert message.startswith(f"parallel.dask_address is '{address}': nothing listening at 127.0.0.1:")
    assert "(Connection refused)" in message and took < 1


def test_an_http_server_is_refused_within_the_timeout_not_waited_on_for_ever(http_server):
    message, took = refusal(http_server)
    assert message.startswith(
        f"parallel.dask_address is '{http_server}': the server at {http_server} is not a Dask scheduler ("
    )
    assert took < 2 * TIMEOUT + 1  # the TCP connect and Dask's handshake, each within the timeout
    assert PROBE_TIMEOUT_S <= 10  # the flow's own bound: seconds, not the 30 s of Dask's connect


@pytest.mark.parametrize(
    "address,why",
    [
        ("127.0.0.1", "missing port number"),
        ("http://127.0.0.1:8787", "unknown address scheme 'http'"),  # the dashboard's URL
        ("tcp://127.0.0.1:70000", "port 70000"),
        ("tcp://[::1]:x", "invalid literal"),
        (8786, "expected str"),
    ],
)
def test_a_malformed_address_is_refused(address, why):
    message, took = refusal(address)
    assert message.startswith(f"parallel.dask_address is {address!r}: not an address of a Dask scheduler (")
    assert why in message and took < 1


def test_a_host_that_does_not_resolve():
    message, _ = refusal("tcp://no-such-host.invalid:8786")
    assert message.startswith("parallel.dask_address is 'tcp://no-such-host.invalid:8786': the host no-such-host")


def test_a_scheduler_passes_and_a_worker_is_not_one():
    from distributed import Scheduler, Worker

    async def probe_both() -> str:
        async with Scheduler(host="127.0.0.1", port=0, dashboard_address=":0") as scheduler:
            await asyncio.to_thread(check_dask_address, scheduler.address, TIMEOUT)  # no error
            async with Worker(scheduler.address, host="127.0.0.1", dashboard_address=":0", nthreads=1) as worker:
                with pytest.raises(SettingsError) as err:
                    await asyncio.to_thread(check_dask_address, worker.address, TIMEOUT)
                return str(err.value)

    message = asyncio.run(probe_both())
    assert "is not a Dask scheduler (a Dask Worker)" in message


def test_the_prepare_command_refuses_in_one_line_before_any_work(tmp_path, monkeypatch, capfd):
    """`python -m flows.prepare` (flows.cli): the probe runs before the Dask runner is built, so no
    flow starts (no Prefect server needed), nothing is written; one line, exit 2."""
    import flows
    import flows.prepare

    params = {
        "tasks": {"copy_rules": "data"},
        "prepare": {"copy_rules": {"reader": "copynet_rules"}},
        "parallel": {"task_runner": "dask", "dask_address": f"tcp://127.0.0.1:{free_port()}"},
    }
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.setattr(sys, "argv", ["prepare", "--corpus", "copy_rules", "--params", str(tmp_path / "params.yaml")])
    with pytest.raises(SystemExit) as exit_:
        flows.cli(flows.prepare.prepare_corpus, None, "corpus")
    assert exit_.value.code == 2
    err = capfd.readouterr().err
    assert err.startswith("error: parallel.dask_address is 'tcp://127.0.0.1:") and err.count("\n") == 1, err
    assert "nothing listening" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]
