"""``train.rdzv_endpoint`` (``train.nnodes`` > 1) is checked before torchrun starts, in one line naming
it: set, host:port (port 1-65535, IPv6 in brackets), its host resolving and, on the machine that runs
the stage (it hosts the rendezvous), one of this machine's own addresses. Before, torchrun started
and the user got the generic "a machine stopped or lost contact" after its timeout."""

from __future__ import annotations

import socket
import sys

import pytest
import yaml

from pipeline.config.validation import SettingsError
from pipeline.stages import train, train_node
from pipeline.training.distributed import check_rdzv_endpoint, parse_rdzv_endpoint, torchrun_command
from tests.helpers import tiny_params

NOT_HERE = "192.0.2.1"  # TEST-NET-1 (RFC 5737): never a machine's own address


@pytest.mark.parametrize(
    "endpoint,parsed",
    [("node0:29500", ("node0", 29500)), ("10.0.0.1:1", ("10.0.0.1", 1)), ("[fd00::1]:65535", ("fd00::1", 65535))],
)
def test_host_port_parses(endpoint, parsed):
    assert parse_rdzv_endpoint(endpoint) == parsed


MALFORMED = ["node0", "node0:", ":29500", "node0:0", "node0:65536", "fd00::1:29500", "[zz]:1", "[10.0.0.1]:1", "a b:1"]


@pytest.mark.parametrize("endpoint", [*MALFORMED, "node0:29500x", 29500])
def test_anything_else_is_refused_naming_the_setting(endpoint):
    with pytest.raises(SettingsError) as err:
        check_rdzv_endpoint(endpoint, nnodes=2, host=False)
    assert str(err.value).startswith(f"train.rdzv_endpoint is {endpoint!r}: it must be host:port with a port from 1")


def test_several_machines_need_an_endpoint_one_needs_none():
    check_rdzv_endpoint(None, nnodes=1, host=True)
    check_rdzv_endpoint("not an endpoint", nnodes=1, host=True)  # unused with one machine
    for check in (lambda: check_rdzv_endpoint(None, 2, True), lambda: torchrun_command("m", [], nproc=1, nnodes=2)):
        with pytest.raises(SettingsError, match=r"^train.nnodes is 2 but train.rdzv_endpoint is not set: "):
            check()


def test_the_hosting_machine_s_endpoint_must_be_one_of_its_own_addresses():
    for own in ("127.0.0.1:29500", "localhost:29500", f"{socket.gethostname()}:29500"):
        check_rdzv_endpoint(own, nnodes=2, host=True)
    check_rdzv_endpoint(f"{NOT_HERE}:29500", nnodes=2, host=False)  # a joining machine: another one's address
    with pytest.raises(SettingsError) as err:
        check_rdzv_endpoint(f"{NOT_HERE}:29500", nnodes=2, host=True)
    assert str(err.value) == (
        f"train.rdzv_endpoint is '{NOT_HERE}:29500' but {NOT_HERE} is not an address of this machine, which runs "
        "the stage and so hosts the rendezvous: give one of its own addresses that the other machines reach "
        f"(or run the stage on {NOT_HERE})"
    )
    with pytest.raises(SettingsError, match=r"^train.rdzv_endpoint is '0.0.0.0:29500': 0.0.0.0 means any address"):
        check_rdzv_endpoint("0.0.0.0:29500", nnodes=2, host=True)


def test_an_ipv6_endpoint_of_this_machine():
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    check_rdzv_endpoint("[::1]:29500", nnodes=2, host=True)


def test_a_host_that_does_not_resolve():
    with pytest.raises(SettingsError, match=r"^train.rdzv_endpoint is 'no-such-host.invalid:29500' but the host"):
        check_rdzv_endpoint("no-such-host.invalid:29500", nnodes=2, host=False)


def _params(tmp_path, **train_settings) -> str:
    params = tiny_params()
    params["train"].update(device="cpu", **train_settings)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    return str(tmp_path / "params.yaml")


def test_the_stage_refuses_another_machine_s_endpoint_in_one_line_before_any_work(tmp_path, monkeypatch, capfd):
    """flows.cli (the stages' command line) around the stage itself: one line, exit 2; no data was
    needed (the project holds only params.yaml), torchrun never started."""
    import flows

    params = _params(tmp_path, nnodes=2, rdzv_endpoint=f"{NOT_HERE}:29500")
    monkeypatch.setattr(train.subprocess, "run", lambda *a, **k: pytest.fail("torchrun started"))
    monkeypatch.setattr(sys, "argv", ["train", "--task", "copy_rules", "--mechanism", "copynet", "--params", params])
    with pytest.raises(SystemExit) as exit_:
        flows.cli(train.run, None, "task", "mechanism")
    assert exit_.value.code == 2
    err = capfd.readouterr().err
    assert err.startswith(f"error: train.rdzv_endpoint is '{NOT_HERE}:29500' but {NOT_HERE} is not an address of")
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    "settings,message",
    [
        ({"nnodes": 2}, "error: train.nnodes is 2 but train.rdzv_endpoint is not set: "),
        ({"nnodes": 2, "rdzv_endpoint": "node0"}, "error: train.rdzv_endpoint is 'node0': it must be host:port"),
        ({"nnodes": 1}, "error: train.nnodes is 1 for copy_rules/copynet: there is no other machine's job to join"),
    ],
)
def test_a_joining_machine_refuses_in_one_line(tmp_path, capsys, settings, message):
    params = _params(tmp_path, **settings)
    with pytest.raises(SystemExit) as exit_:
        train_node.main(["--task", "copy_rules", "--mechanism", "copynet", "--params", params])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1, err
