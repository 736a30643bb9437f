"""Careless input to `eval-options`, `render-results` and `retrain`: one line on stderr naming the
file, option or setting, exit code 2, before any decoding or any file is written (docs/guarantees.md)."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from argparse import Namespace
from pathlib import Path

import pytest
import yaml

from benchmarks.toy import TASK
from pipeline.config.params import load_params
from pipeline.config.paths import TaskPaths
from tests.helpers import REPO, load_script


def call(main, argv: list[str]) -> tuple[int, str, str]:
    """``main(argv)`` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def one_line(err: str) -> str:
    """The single stderr line of a refusal (and no traceback)."""
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes: what a refused command must leave as it was."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------- eval-options


@pytest.fixture(scope="module")
def eval_options():
    return load_script("eval_options")


@pytest.fixture
def toy(toy_project, tmp_path) -> Path:
    root = tmp_path / "toy"
    shutil.copytree(toy_project, root)
    return root


def options_argv(root: Path, *argv: str) -> list[str]:
    return ["--task", TASK, "--params", str(root / "params.yaml"), "--mechanisms", "copynet", *argv]


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ("beam_size=21", "serving.max_beam_size=20"),
        ("beam_size=100000", "serving.max_beam_size=20"),
        ("max_len=201", "serving.max_output_len=200"),
        ("max_len=100000000", "serving.max_output_len=200"),
    ],
)
def test_eval_options_refuses_decoding_settings_over_the_serving_limits(eval_options, toy, setting, words):
    out = toy / "options.json"
    rc, shown, err = call(eval_options.main, options_argv(toy, "--settings", setting, "--json", str(out)))
    line = one_line(err)
    assert rc == 2 and f"--settings {setting}" in line and words in line
    assert shown == "" and not out.exists()  # refused before anything was decoded


def test_eval_options_reads_the_limits_from_params_serving_as_predict_does(eval_options, toy):
    params = yaml.safe_load((toy / "params.yaml").read_text())
    params.setdefault("serving", {})["max_beam_size"] = 30
    (toy / "params.yaml").write_text(yaml.safe_dump(params))
    rc, _, err = call(eval_options.main, options_argv(toy, "--settings", "beam_size=31"))
    assert rc == 2 and "serving.max_beam_size=30" in one_line(err)
    # under the raised limit the plan accepts it (checked without decoding)
    args = Namespace(task=TASK, mechanisms=["copynet"], splits=["test"], settings=["beam_size=25"])
    checked = load_params(toy / "params.yaml")
    _, settings, _ = eval_options.plan(args, checked, TaskPaths(TASK, toy))
    assert settings == [("beam_size", 25)]


@pytest.mark.parametrize("where", ["a directory", "a missing directory", "/proc"])
def test_eval_options_checks_the_json_path_before_decoding(eval_options, toy, tmp_path, where):
    target = {
        "a directory": tmp_path / "adir",
        "a missing directory": tmp_path / "nosuch" / "x.json",
        "/proc": Path("/proc/careless_x.json"),
    }[where]
    (tmp_path / "adir").mkdir()
    before = tree(tmp_path / "adir")
    rc, shown, err = call(eval_options.main, options_argv(toy, "--settings", "beam_size=2", "--json", str(target)))
    line = one_line(err)
    assert rc == 2 and f"--json {target}" in line
    assert shown == ""  # nothing decoded
    assert tree(tmp_path / "adir") == before and not (tmp_path / "nosuch").exists()


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, "cannot be read"),  # missing
        ("dir", "cannot be read"),
        (b"{", "not valid JSON"),
        (b"[1,2]", "not a report of eval_options --json"),
        (b"{}", "not a report of eval_options --json"),
        ('{"task": "caf\u00e9"}'.encode("latin-1"), "not UTF-8"),
        (b'{"task": "t", "splits": ["test"], "rows": {"m": {"x": {"test": 3}}}}', "not a report"),
    ],
    ids=["missing", "directory", "open-brace", "list", "empty-object", "latin-1", "bad-rows"],
)
def test_eval_options_print_refuses_a_bad_file_naming_it(eval_options, tmp_path, content, words):
    path = tmp_path / "report.json"
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    rc, shown, err = call(eval_options.main, ["--print", str(path)])
    line = one_line(err)
    assert rc == 2 and f"--print {path}" in line and words in line and shown == ""


def test_eval_options_refuses_unknown_columns_listing_the_known_ones(eval_options, toy, tmp_path):
    out = toy / "options.json"
    rc, shown, err = call(
        eval_options.main, options_argv(toy, "--settings", "beam_size=2", "--columns", "nosuch", "--json", str(out))
    )
    line = one_line(err)
    assert rc == 2 and "--columns: nosuch" in line and "known:" in line and "top1" in line
    assert shown == "" and not out.exists()
    # --print: the columns the report holds
    report = {"task": TASK, "splits": ["test"], "rows": {"copynet": {"beam_size=2": {"test": {"top1": 50.0}}}}}
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    rc, shown, err = call(eval_options.main, ["--print", str(path), "--columns", "rouge1"])
    line = one_line(err)
    assert rc == 2 and "--columns: rouge1" in line and "known: top1" in line and shown == ""
    rc, shown, err = call(eval_options.main, ["--print", str(path), "--columns", "top1"])
    assert rc == 0 and err == "" and "| copynet | beam_size=2 | 50.00 | - | - | - |" in shown


@pytest.mark.parametrize("bad", [b"{bad", b"[]", b"\xff"], ids=["json", "list", "bytes"])
def test_eval_options_names_a_corrupt_evaluate_metrics_file_before_decoding(eval_options, toy, bad):
    metrics = TaskPaths(TASK, toy).evaluation("copynet") / "metrics.json"
    metrics.parent.mkdir(parents=True, exist_ok=True)
    metrics.write_bytes(bad)
    out = toy / "options.json"
    rc, shown, err = call(eval_options.main, options_argv(toy, "--settings", "beam_size=2", "--json", str(out)))
    assert rc == 2 and str(metrics) in one_line(err)
    assert shown == "" and not out.exists()


# ---------------------------------------------------------------- render-results


@pytest.fixture(scope="module")
def render_results():
    return load_script("render_results")


def render_project(root: Path) -> Path:
    """A project with the repository's params and copy_rules metrics (as tests/test_docs.py's)."""
    shutil.copy(REPO / "params.yaml", root / "params.yaml")
    shutil.copytree(
        REPO / "data" / "eval" / "runs" / "copy_rules",
        root / "data/eval/runs/copy_rules",
        ignore=shutil.ignore_patterns("predictions", "*.png"),
    )
    (root / "docs").mkdir()
    (root / "docs" / "results.md").write_text("# Results\n\n<!-- results:copy_rules -->\n<!-- /results -->\n")
    return root


@pytest.mark.parametrize("kind", ["missing", "a file", "no params.yaml"])
def test_render_results_refuses_a_root_that_is_not_a_project(render_results, tmp_path, kind):
    root = {"missing": tmp_path / "noroot", "a file": tmp_path / "file", "no params.yaml": tmp_path / "empty"}[kind]
    (tmp_path / "file").write_text("x")
    (tmp_path / "empty").mkdir()
    before = tree(tmp_path)
    rc, shown, err = call(render_results.main, ["--root", str(root)])
    line = one_line(err)
    assert rc == 2 and f"--root {root}" in line and shown == ""
    assert tree(tmp_path) == before


@pytest.mark.parametrize("bad", [b"{bad", b"[]", b'{"test": 3}', b"\xff\xfe"], ids=["json", "list", "shape", "bytes"])
@pytest.mark.parametrize("check", [True, False], ids=["check", "write"])
def test_render_results_names_a_corrupt_metrics_file(render_results, tmp_path, bad, check):
    root = render_project(tmp_path)
    metrics = root / "data/eval/runs/copy_rules/copynet/metrics.json"
    metrics.write_bytes(bad)
    before = tree(root)
    rc, shown, err = call(render_results.main, [*(["--check"] if check else []), "--root", str(root)])
    line = one_line(err)
    assert rc == 2 and "data/eval/runs/copy_rules/copynet/metrics.json" in line
    assert tree(root) == before  # no page rewritten


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda m: m["test"].pop("top1"), "test.top1 is missing"),
        (lambda m: m["valid"]["groups"]["x->x"].pop("top10"), "valid.groups.x->x.top10 is missing"),
        (lambda m: m["test"].update(top10="84.4"), "test.top10 is '84.4', not a number"),
        (lambda m: m["test"]["copy"]["outputs"].update(copied=[1]), "test.copy.outputs.copied is '[1]', not a number"),
        (lambda m: m["valid"].pop("n"), "valid.n is missing"),
    ],
    ids=["top1", "group top10", "text figure", "list figure", "n"],
)
def test_render_results_names_the_figure_a_metrics_file_lacks(render_results, tmp_path, edit, named):
    """A well-formed JSON file without a figure the tables read is named with that figure's key, in
    one line, and nothing is written; a bug of the tables' own would not read as a bad file."""
    root = render_project(tmp_path)
    path = root / "data/eval/runs/copy_rules/wean/metrics.json"
    metrics = json.loads(path.read_text())
    edit(metrics)
    path.write_text(json.dumps(metrics))
    before = tree(root)
    rc, shown, err = call(render_results.main, ["--root", str(root)])
    assert rc == 2 and shown == ""
    line = one_line(err)  # render_results: <page of the block>: <metrics file>: <what it lacks>
    assert line.endswith(f": data/eval/runs/copy_rules/wean/metrics.json: {named} (the tables need it)"), line
    assert tree(root) == before


def test_render_results_names_a_bad_params_file(render_results, tmp_path):
    root = render_project(tmp_path)
    (root / "params.yaml").write_text("tasks: [\n")
    rc, _, err = call(render_results.main, ["--check", "--root", str(root)])
    assert rc == 2 and f"{root / 'params.yaml'}" in one_line(err)


# ---------------------------------------------------------------- retrain


@pytest.fixture(scope="module")
def retrain_main():
    from flows.retrain import main

    return main


def test_retrain_refuses_a_params_file_outside_a_project(retrain_main, tmp_path):
    outside = tmp_path / "x"
    outside.mkdir()
    shutil.copy(REPO / "params.yaml", outside / "params.yaml")
    before = tree(outside)
    rc, _, err = call(retrain_main, ["run", "--params", str(outside / "params.yaml")])
    line = one_line(err)
    assert rc == 2 and f"--params {outside / 'params.yaml'}" in line and "no dvc.yaml" in line
    assert tree(outside) == before and not (outside / "data").exists()  # nothing created beside it


def test_retrain_refuses_a_params_file_dvc_does_not_read(retrain_main, tmp_path):
    """dvc repro, which refreshes the data, reads params.yaml: a copy under another name beside dvc.yaml
    would train the challenger under other settings than the data it is trained on."""
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")
    shutil.copy(REPO / "params.yaml", tmp_path / "mine.yaml")
    before = tree(tmp_path)
    rc, _, err = call(retrain_main, ["run", "--params", str(tmp_path / "mine.yaml")])
    line = one_line(err)
    assert rc == 2 and line.startswith(f"copyseq retrain: error: --params {tmp_path / 'mine.yaml'}: ")
    assert "reads params.yaml beside dvc.yaml, not mine.yaml" in line
    assert tree(tmp_path) == before


def test_retrain_serve_names_prefect_api_url_when_no_server_answers(retrain_main, monkeypatch):
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:1/api")
    rc, _, err = call(retrain_main, ["serve"])
    line = one_line(err)
    assert rc == 2 and "PREFECT_API_URL=http://127.0.0.1:1/api" in line and "no Prefect server answers" in line


def test_retrain_serve_without_prefect_api_url_is_one_line(retrain_main, monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    rc, _, err = call(retrain_main, ["serve"])
    assert rc == 2 and "PREFECT_API_URL" in one_line(err)


def test_retrain_serve_checks_the_settings_first_a_bad_cron_is_one_line(retrain_main, tmp_path, monkeypatch):
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:1/api")  # never reached: the settings come first
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["retrain"]["cron"] = "every sunday"
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    rc, _, err = call(retrain_main, ["serve", "--params", str(tmp_path / "params.yaml")])
    line = one_line(err)
    assert rc == 2 and "retrain.cron" in line and "every sunday" in line


def test_retrain_serve_serves_the_deployment_on_the_params_cron_without_prefects_ui_link(retrain_main, monkeypatch):
    """Prefect's starting message links a UI the project's server runs without: serve prints its own
    line (the deployment, its cron, how to trigger a run) and hands Prefect the cron of params.yaml."""
    import flows.retrain as module

    served = []
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:1/api")
    monkeypatch.setattr(module, "check_prefect_server", lambda url: None)  # a server that answers
    monkeypatch.setattr(module.retrain_flow, "serve", lambda **kw: served.append(kw))
    rc, out, err = call(retrain_main, ["serve"])
    retrain = load_params(REPO / "params.yaml")["retrain"]
    name = f"retrain-{retrain['task']}"
    assert rc == 0 and err == "" and len(served) == 1
    assert served[0]["cron"] == retrain["cron"] and served[0]["name"] == name and served[0]["limit"] == 1
    assert served[0]["print_starting_message"] is False
    assert out == (
        f"serving retrain/{name} on cron {retrain['cron']!r} (Ctrl-C stops it; a run now: "
        f"prefect deployment run retrain/{name})\n"
    )
