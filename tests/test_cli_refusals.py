"""`copyseq` refuses careless input in one line on stderr with exit code 2, before any child process
starts: its own usage errors, `serve` of a model the registry does not hold or on a bad or busy port,
`repro` of an unknown stage or option; `serve` finds the server's uvicorn without an activated
environment, `run --dry` previews a row just listed under `mechanisms`, and `repro --dry` a row that
has not trained (DVC's dry run fails on it: tests/test_cli_repro_dry.py runs DVC's).

Every test calls `pipeline.cli.main` in this process with the child process (`subprocess.call`)
replaced by a recorder: no server, DVC or Prefect starts."""

from __future__ import annotations

import os
import re
import shutil
import socket
import sys
import time
from pathlib import Path

import pytest

import pipeline.cli as cli
from pipeline.cli import main


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("copyseq: error: "), err
    return lines[0]


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def spawned(monkeypatch) -> list[dict]:
    """The child processes copyseq would start (their command, directory and environment): none starts."""
    calls: list[dict] = []

    def call(cmd, cwd=None, env=None):
        calls.append({"cmd": list(cmd), "cwd": cwd, "env": env})
        return 0

    monkeypatch.setattr(cli.subprocess, "call", call)
    return calls


@pytest.fixture(scope="module")
def registry(tmp_path_factory) -> str:
    """A SQLite MLflow registry (registry entries only, no model files: serve's checks read no more):
    copy_rules versions 1 and 2 with `champion` on 2; other_task version 1 with no alias."""
    from mlflow import MlflowClient

    root = tmp_path_factory.mktemp("registry")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    for name, versions in (("copy_rules", 2), ("other_task", 1)):
        client.create_registered_model(name)
        for _ in range(versions):
            client.create_model_version(name, source=str(root / "model"))
    client.set_registered_model_alias("copy_rules", "champion", "2")
    return uri


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- usage errors: one line, not click's boxed usage block ----------------------------------------


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["run", "nosuch"], "TASK: 'nosuch' is not under `tasks`"),
        (["run", "copy_rules", "-m", "nosuchmech"], "--mechanism: nosuchmech not under `mechanisms`"),
        (["run", "copy_rules", "--bogus"], "--bogus"),
        (["serve", "copy_rules", "--port", "abc"], "'--port'"),
        (["serve"], "Missing argument 'task'"),
        (["nosuchcommand"], "'nosuchcommand'"),
    ],
)
def test_a_usage_error_is_one_line_with_exit_2(argv, names, capsys, spawned):
    assert main(argv) == 2
    out = capsys.readouterr()
    assert names in one_error_line(out.err)
    assert out.out == "" and spawned == []


def test_help_and_the_subcommands_exit_codes_are_kept(capsys, spawned, monkeypatch):
    assert main(["--help"]) == 0 and "serve" in capsys.readouterr().out
    assert main([]) == 0 and "serve" in capsys.readouterr().out  # no subcommand: the help
    assert main(["serve", "--help"]) == 0 and "--port" in capsys.readouterr().out
    monkeypatch.setattr(cli.subprocess, "call", lambda cmd, cwd=None, env=None: 3)
    assert main(["check", "--params", "x.yaml"]) == 3  # a pass-through subcommand's own exit code


# --- serve: the registry, the port, PATH ----------------------------------------------------------


def test_serve_puts_this_python_s_bin_directory_first_on_the_server_s_path(registry, spawned, monkeypatch):
    """`.venv/bin/copyseq serve` without an activated environment: MLflow runs `bash -c 'exec uvicorn
    ...'`, which must find this environment's uvicorn."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", registry)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    port = free_port()
    assert main(["serve", "copy_rules", "--port", str(port)]) == 0
    (child,) = spawned
    assert child["cmd"][:3] == [sys.executable, "-m", "mlflow"]
    assert "models:/copy_rules@champion" in child["cmd"] and str(port) in child["cmd"]
    env = child["env"]
    bin_dir = os.path.dirname(sys.executable)
    assert env["PATH"].split(os.pathsep) == [bin_dir, "/usr/bin", "/bin"]
    assert Path(shutil.which("uvicorn", path=env["PATH"])).parent == Path(bin_dir)
    assert env["MLFLOW_TRACKING_URI"] == registry


def test_serve_of_a_version_number(registry, spawned, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", registry)
    assert main(["serve", "copy_rules", "--alias", "1", "--port", str(free_port())]) == 0
    assert "models:/copy_rules/1" in spawned[0]["cmd"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["serve", "nosuch"], ["serve nosuch --alias champion:", "'nosuch'", "registered: copy_rules, other_task"]),
        (["serve", "other_task"], ["serve other_task --alias champion:", "no alias 'champion'", "aliases: none"]),
        (["serve", "copy_rules", "--alias", "nosuch"], ["no alias 'nosuch'", "versions: 1, 2", "champion -> 2"]),
        (["serve", "copy_rules", "--alias", "999"], ["serve copy_rules --alias 999:", "no version 999", "1, 2"]),
    ],
)
def test_serve_of_a_model_the_registry_does_not_hold_is_refused(argv, says, registry, capsys, spawned, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", registry)
    db = Path(registry.removeprefix("sqlite:///"))
    before = db.read_bytes()
    assert main([*argv, "--port", str(free_port())]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert all(word in line for word in says), line
    assert spawned == [] and db.read_bytes() == before


def test_serve_without_a_store_refuses_and_creates_none(tmp_path, capsys, spawned, monkeypatch):
    """Neither the store of MLFLOW_TRACKING_URI nor the project's mlflow.db is created to look in."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}")
    assert main(["serve", "copy_rules", "--port", str(free_port())]) == 2
    assert "no model registered yet" in one_error_line(capsys.readouterr().err)
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    monkeypatch.setattr(cli, "REPO_ROOT", tmp_path)
    assert main(["serve", "copy_rules", "--port", str(free_port())]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "serve copy_rules --alias champion: no model registered yet" in line and str(tmp_path / "mlflow.db") in line
    assert spawned == [] and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("content", "says"),
    [(b"", "no model registered yet"), (b"not a database\n", "cannot be read: (sqlite3.DatabaseError)")],
)
def test_serve_on_an_empty_or_broken_store_refuses_and_leaves_it(content, says, tmp_path, capsys, spawned, monkeypatch):
    """An empty file is no store (MLflow would write its tables into it); a file that is no database is named."""
    db = tmp_path / "mlflow.db"
    db.write_bytes(content)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    assert main(["serve", "copy_rules", "--port", str(free_port())]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert says in line and str(db) in line
    assert spawned == [] and db.read_bytes() == content and list(tmp_path.iterdir()) == [db]


@pytest.fixture
def http_404():
    """A local HTTP server that answers every request 404 (something else than MLflow on that port)."""
    import http.server
    import threading

    class NotMlflow(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_error(404)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), NotMlflow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("server", ["nothing listening", "not MLflow"])
def test_serve_on_a_tracking_server_that_does_not_answer_is_refused_at_once(
    server, http_404, capsys, spawned, monkeypatch
):
    """MLflow's client retries an HTTP store that does not answer for minutes; the check asks its
    /health once (refused, or not MLflow's answer) and refuses in one line."""
    uri = f"http://127.0.0.1:{free_port()}" if server == "nothing listening" else http_404
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    started = time.monotonic()
    assert main(["serve", "copy_rules", "--port", str(free_port())]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert f"the model registry at {uri} cannot be read: " in line
    assert (
        "no MLflow server answers there (ConnectionError" if server == "nothing listening" else "answered HTTP 404"
    ) in line
    assert time.monotonic() - started < 30 and spawned == []


@pytest.mark.parametrize("port", ["-1", "0", "70000"])
def test_serve_on_a_port_out_of_range_is_refused(port, capsys, spawned):
    assert main(["serve", "copy_rules", "--port", port]) == 2
    assert f"'--port': {port} is not a port: must be 1-65535" in one_error_line(capsys.readouterr().err)
    assert spawned == []


def test_serve_on_a_port_in_use_is_refused(capsys, spawned):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["serve", "copy_rules", "--port", str(port)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert f"'--port': 127.0.0.1:{port} cannot be listened on" in line
    assert spawned == []


# --- run --dry of a row just listed ---------------------------------------------------------------


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A prepared copy_rules whose encdec row has run, with luong just listed under `mechanisms`."""
    (tmp_path / "data" / "shards" / "copy_rules").mkdir(parents=True)
    (tmp_path / "data" / "settings" / "copy_rules").mkdir(parents=True)
    (tmp_path / "data" / "settings" / "copy_rules" / "encdec.json").write_text("{}")
    (tmp_path / "data" / "checkpoints" / "copy_rules" / "encdec").mkdir(parents=True)
    params = {"tasks": {"copy_rules": "data/raw/copy_rules"}, "mechanisms": ["encdec", "luong"]}
    monkeypatch.setattr(cli, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(cli, "load_params", lambda path=None: params)
    return tmp_path


def test_run_dry_previews_a_row_just_listed(project, capsys, spawned):
    """DVC cannot preview it (its settings file does not exist yet): copyseq names its stages."""
    before = files_under(project)
    assert main(["run", "copy_rules", "-m", "luong", "--dry"]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines() == [
        "luong of copy_rules not run here yet (no settings file or checkpoint), so these stages would run:",
        "Running stage 'settings'",
        "Running stage 'train@copy_rules-luong'",
        "Running stage 'evaluate@copy_rules-luong'",
    ]
    assert out.err == "" and spawned == [] and files_under(project) == before


def test_run_dry_leaves_the_rows_that_have_run_to_dvc(project, capsys, spawned):
    assert main(["run", "copy_rules", "--dry", "--compare"]) == 0
    out = capsys.readouterr().out
    assert "Running stage 'evaluate@copy_rules-luong'" in out and "Running stage 'compare'" in out
    assert "encdec" not in out
    (child,) = spawned
    assert child["cmd"] == [sys.executable, "-m", "dvc", "repro", "--dry", "evaluate@copy_rules-encdec"]


# --- repro: stages and options checked before DVC starts ------------------------------------------


@pytest.fixture
def dvc_project(tmp_path, monkeypatch) -> Path:
    """A DVC project (no git) with one stage, `hello`, and every task prepared (none)."""
    (tmp_path / ".dvc").mkdir()
    (tmp_path / ".dvc" / "config").write_text("[core]\n    no_scm = true\n")
    (tmp_path / "dvc.yaml").write_text("stages:\n  hello:\n    cmd: echo hi\n")
    monkeypatch.setattr(cli, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(cli, "load_params", lambda path=None: {"tasks": {}})
    return tmp_path


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["repro", "--dry", "nosuchstage"], "repro: Stage 'nosuchstage' not found inside 'dvc.yaml'"),
        (["repro", "nosuchstage"], "repro: Stage 'nosuchstage' not found"),
        (["repro", "--dry", "--bogus"], "repro: unrecognized arguments: --bogus"),
    ],
)
def test_repro_of_an_unknown_stage_or_option_is_refused(argv, says, dvc_project, capsys, spawned):
    assert main(argv) == 2
    assert says in one_error_line(capsys.readouterr().err)
    assert spawned == []


def test_repro_hands_known_stages_and_help_to_dvc(dvc_project, spawned):
    assert main(["repro", "--dry", "hello"]) == 0
    assert spawned[-1]["cmd"] == [sys.executable, "-m", "dvc", "repro", "--dry", "hello"]
    assert main(["repro", "--help"]) == 0  # DVC's own help, unchecked
    assert spawned[-1]["cmd"][-3:] == ["dvc", "repro", "--help"]


# --- repro --dry of a row that has not run: what DVC cannot preview -------------------------------


ROWS_DVC_YAML = """\
stages:
  train:
    foreach: [ran, new]
    do:
      cmd: mkdir -p ckpt/${item}
      outs:
        - ckpt/${item}
  evaluate:
    foreach: [ran, new]
    do:
      cmd: cp -r ckpt/${item} runs/${item}
      deps:
        - ckpt/${item}
      outs:
        - runs/${item}
  compare:
    cmd: ls runs > table
    deps:
      - runs
    outs:
      - table
"""


def write_rows_project(root: Path) -> None:
    """A DVC project (no git) in the shape of one task's rows: `ran` has its checkpoint and evaluation,
    `new` neither (its train stage has never run), and compare reads every evaluation."""
    (root / ".dvc").mkdir()
    (root / ".dvc" / "config").write_text("[core]\n    no_scm = true\n")
    (root / "dvc.yaml").write_text(ROWS_DVC_YAML)
    for out in ("ckpt/ran", "runs/ran"):
        (root / out).mkdir(parents=True)
        (root / out / "model").write_text("1")


@pytest.fixture
def rows_project(tmp_path, monkeypatch) -> Path:
    """write_rows_project's, as the project copyseq runs in (every task prepared: none)."""
    write_rows_project(tmp_path)
    monkeypatch.setattr(cli, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(cli, "load_params", lambda path=None: {"tasks": {}})
    return tmp_path


def outside_dvc(files: dict[str, bytes]) -> dict[str, bytes]:
    return {name: data for name, data in files.items() if not name.startswith(".dvc/")}


def dvc_repro(*argv: str) -> list[str]:
    return [sys.executable, "-m", "dvc", "repro", *argv]


def test_repro_dry_previews_the_stages_of_a_row_that_has_not_run(rows_project, capsys, spawned):
    """`dvc repro --dry` fails on evaluate@new (`[Errno 2] No such file or directory: .../ckpt/new`:
    it hashes the deps of a stage that would run, and a dry run makes no checkpoint): copyseq hands
    DVC the stages before it and names it and compare, which reads its output, as stages that would run."""
    before = outside_dvc(files_under(rows_project))
    assert main(["repro", "--dry"]) == 0
    (child,) = spawned
    assert child["cmd"][:5] == dvc_repro("--dry")
    assert sorted(child["cmd"][5:]) == ["evaluate@ran", "train@new", "train@ran"]  # no -s: walked with their deps
    assert child["cwd"] == rows_project
    assert capsys.readouterr().out.splitlines() == [
        "not made here yet, so DVC cannot preview the stages that read them: ckpt/new; these stages would run too:",
        "Running stage 'evaluate@new'",
        "Running stage 'compare'",
    ]
    assert outside_dvc(files_under(rows_project)) == before  # DVC's own .dvc/tmp aside


@pytest.mark.parametrize(
    ("argv", "options", "targets", "previewed"),
    [
        (["compare", "-v", "-f"], ["-v", "--force", "--dry"], ["evaluate@ran", "train@new", "train@ran"], ["evaluate@new", "compare"]),
        (["-k", "--downstream", "train@new"], ["--dry", "--keep-going", "-s"], ["train@new"], ["evaluate@new", "compare"]),
        (["-s", "evaluate@new"], None, None, ["evaluate@new"]),  # nothing left for DVC
        (["evaluate@ran"], ["--dry"], ["evaluate@ran"], []),  # nothing DVC cannot preview: as asked
    ],
    ids=["options-kept", "downstream", "single-item", "a-row-that-ran"],
)  # fmt: skip
def test_repro_dry_of_targets_leaves_out_what_dvc_cannot_preview(
    argv, options, targets, previewed, rows_project, capsys, spawned
):
    """DVC is handed the stages walked but those left out, with the options that do not choose stages
    (-s where the walk was not of the targets and their deps)."""
    assert main(["repro", "--dry", *argv]) == 0
    if options is None:
        assert spawned == []
    else:
        (child,) = spawned
        cmd = child["cmd"][4:]
        assert cmd[: len(options)] == options and sorted(cmd[len(options) :]) == targets
    assert re.findall(r"Running stage '([^']+)'", capsys.readouterr().out) == previewed


@pytest.mark.parametrize(
    "argv",
    [["predict", "--input", "in.txt"], ["export", "x", "--out", "o"], ["tasks", "list"], ["eval-options"]],
    ids=["predict", "export", "tasks", "eval-options"],
)
def test_pass_through_commands_run_in_the_users_directory(spawned, argv):
    """`copyseq predict --input in.txt` reads the user's in.txt, not one in the project root."""
    assert main(argv) == 0
    assert spawned[-1]["cwd"] is None  # the child inherits this process's directory


def test_dvc_commands_run_in_the_project_root(spawned, monkeypatch):
    monkeypatch.setattr(cli, "load_params", lambda path=None: {"tasks": {"copy_rules": "data"}})
    monkeypatch.setattr(cli, "task_names", lambda params: ["copy_rules"])
    assert main(["repro", "--dry"]) == 0
    assert spawned and all(call["cwd"] == cli.REPO_ROOT for call in spawned)
