"""Careless input to ``copyseq export`` and ``copyseq predict``: one line on stderr naming the option or
file and what it must be, exit code 2, nothing written and nothing deleted.

``export --out`` replaces only an earlier export of its own format that holds nothing but the export's
files (a folder with a stranger's manifest.json, or an earlier export with the user's notes in it, is
refused and kept whole); ``predict`` refuses ``--output`` equal to ``--input`` or a directory before any
work, bounds ``--threads`` and refuses the settings it would otherwise ignore; argparse's errors are one
line, without the usage block. Most cases are refused before a model is read (a checkpoint path that
does not exist proves it); the two that export a model for real are marked slow.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from pipeline.serving.export import main as export_main
from pipeline.serving.predict import main as predict_main
from pipeline.serving.predict import max_threads
from tests.pipeline.serving.test_hf_export import row  # noqa: F401 - the fixture (a trained copy head on tiny BART)
from tests.pipeline.serving.test_onnx_export import TASK, export_rows, write_project

ROW = {"copynet": ("copynet", {}, {})}


def tree(path: Path) -> dict[str, bytes | None]:
    """Every entry under ``path`` with its bytes (None: a directory): what must survive a refusal."""
    return {str(p.relative_to(path)): None if p.is_dir() else p.read_bytes() for p in sorted(path.rglob("*"))}


def one_line(capsys, prog: str) -> str:
    """The only line on stderr, which must be ``prog``'s error line."""
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), err
    return lines[0]


def refused(main, prog: str, args: list[str], capsys) -> str:
    """``main(args)``: exit code 2 and its one line (a usage error exits through SystemExit)."""
    capsys.readouterr()
    try:
        code = main(args)
    except SystemExit as exit_:
        code = exit_.code
    assert code == 2
    return one_line(capsys, prog)


def export_refused(args: list[str], capsys) -> str:
    return refused(export_main, "copyseq export", args, capsys)


def predict_refused(args: list[str], capsys) -> str:
    return refused(predict_main, "copyseq predict", args, capsys)


def fake_onnx_export(path: Path) -> Path:
    """A directory that passes for an earlier ONNX export: a manifest of the exporter's format, and
    only the names an export writes."""
    path.mkdir(parents=True)
    manifest = {"format": 1, "graphs": {"encoder": {}, "step": {}}, "exporter": {"torch": "x"}}
    (path / "manifest.json").write_text(json.dumps(manifest))
    for name in ("encoder.onnx", "step.onnx", "weights.bin", "src.vocab", "tgt.vocab", "serving.json"):
        (path / name).write_text("old")
    return path


def fake_hf_export(path: Path) -> Path:
    """A directory that passes for an earlier Hugging Face export (config.json of the copy head's model
    type, the processor's file, a tokenizer and a stale shard)."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "copyseq_copy_head"}))
    for name in ("copy_head_processor.json", "tokenizer.json", "model-00001-of-00002.safetensors"):
        (path / name).write_text("old")
    return path


# ---------------------------------------------------------------------------------------------
# export --out: only an earlier export of the same format, holding only its own files, is replaced
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("manifest", "why"),
    [
        ("{}", "is not a copyseq export manifest of format 1"),
        ("{bad", "its manifest.json is not JSON"),
        ('{"format": 2, "graphs": {}, "exporter": {}}', "is not a copyseq export manifest of format 1"),
        ('{"format": 1}', "is not a copyseq export manifest of format 1"),
        ("[1, 2]", "is not a copyseq export manifest of format 1"),
        (None, "its manifest.json is not JSON"),  # a directory named manifest.json
    ],
    ids=["empty_object", "not_json", "other_format", "format_only", "list", "a_directory"],
)
def test_export_keeps_a_folder_whose_manifest_is_not_an_exports(tmp_path, capsys, manifest, why) -> None:
    """A web app's folder (manifest.json, index.html) given as --out: refused before any work (the model
    directory does not even exist), every file kept."""
    out = tmp_path / "webapp"
    out.mkdir()
    if manifest is None:
        (out / "manifest.json").mkdir()
    else:
        (out / "manifest.json").write_text(manifest)
    (out / "index.html").write_text("<html>keep me</html>")
    before = tree(out)
    line = export_refused([str(tmp_path / "no_model"), "--out", str(out)], capsys)
    assert f"--out {out}: exists and is not an earlier onnx export" in line and why in line
    assert tree(out) == before


def test_export_keeps_an_earlier_export_holding_the_users_files(tmp_path, capsys) -> None:
    out = fake_onnx_export(tmp_path / "ex1")
    (out / "notes.txt").write_text("my notes")
    (out / "mydata").mkdir()
    (out / "mydata" / "rows.tsv").write_text("a\tb\n")
    before = tree(out)
    line = export_refused([str(tmp_path / "no_model"), "--out", str(out)], capsys)
    assert f"--out {out}: an earlier onnx export that also holds mydata/, notes.txt, not files of the export" in line
    assert "move them out or give another directory" in line
    assert tree(out) == before


def test_export_format_hf_recognises_only_its_own_folders(tmp_path, capsys) -> None:
    """--format hf: a config.json of another model (anyone's Hugging Face folder) is not an earlier
    export; an earlier export holding the user's files is refused naming them; both kept whole."""
    user = tmp_path / "theirs"
    user.mkdir()
    (user / "config.json").write_text(json.dumps({"model_type": "bart"}))
    (user / "pytorch_model.bin").write_text("their weights")
    before = tree(user)
    line = export_refused([str(tmp_path / "no_model"), "--format", "hf", "--out", str(user)], capsys)
    assert "exists and is not an earlier hf export (its config.json is not of a copyseq_copy_head model)" in line
    assert tree(user) == before

    ours = fake_hf_export(tmp_path / "ours")
    (ours / "notes.txt").write_text("my notes")
    before = tree(ours)
    line = export_refused([str(tmp_path / "no_model"), "--format", "hf", "--out", str(ours)], capsys)
    assert f"--out {ours}: an earlier hf export that also holds notes.txt, not files of the export" in line
    assert tree(ours) == before


def test_export_names_out_where_it_cannot_write(tmp_path, capsys) -> None:
    afile = tmp_path / "afile"
    afile.write_text("keep")
    line = export_refused([str(tmp_path / "no_model"), "--out", str(afile / "sub")], capsys)
    assert line.endswith(f"--out {afile / 'sub'}: {afile} is a file, not a directory (nothing was written)")
    if Path("/proc/self").is_dir():  # a place no one can create a directory in, even root
        line = export_refused([str(tmp_path / "no_model"), "--out", "/proc/exportx"], capsys)
        assert "--out /proc/exportx: cannot write in /proc" in line and ".tmp" not in line
        assert not Path("/proc/exportx").exists()


def test_export_model_uri_of_another_scheme_names_what_is_accepted(tmp_path, capsys) -> None:
    line = export_refused(["--model", "http://127.0.0.1:1/model", "--out", str(tmp_path / "out")], capsys)
    assert "--model http://127.0.0.1:1/model: a http: URI is not read here; give models:/<name>@<alias>" in line
    assert "runs:/<run_id>/<path> or a model directory" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["X", "--out", "O", "--format", "hf", "--int8"], "--int8 quantizes an ONNX export (--format onnx)"),
        (["X", "--out", "O", "--log"], "--log needs --model"),
        (["--out", "O"], "give one model: MODEL_DIR or --model URI"),
        (["X", "--model", "models:/t@champion", "--out", "O"], "give one model: MODEL_DIR or --model URI"),
        (["X"], "the following arguments are required: --out"),
        (["X", "--out", "O", "--format", "zip"], "argument --format: invalid choice: 'zip'"),
    ],
    ids=["int8_hf", "log_without_model", "no_model", "two_models", "no_out", "bad_format"],
)
def test_export_usage_errors_are_one_line(tmp_path, capsys, monkeypatch, args, message) -> None:
    monkeypatch.chdir(tmp_path)
    assert message in export_refused(args, capsys)
    assert list(tmp_path.iterdir()) == []


def test_help_still_prints_the_usage(capsys) -> None:
    for main, prog in ((export_main, "copyseq export"), (predict_main, "copyseq predict")):
        with pytest.raises(SystemExit) as exit_:
            main(["--help"])
        assert exit_.value.code == 0 and capsys.readouterr().out.startswith(f"usage: {prog} ")


@pytest.mark.slow
def test_a_real_earlier_export_is_kept_with_the_users_files_and_replaced_without(tmp_path, capsys) -> None:
    """A real export: with the user's notes in it, a second export is refused and keeps everything; once
    they are moved out it is replaced (MODEL_DIR given as its model.pt), and predict --runtime onnx
    reads it with a valid --threads."""
    root = write_project(tmp_path, ROW, steps=0)
    out = export_rows(root, ROW)["copynet"]
    own = tree(out)
    (out / "notes.txt").write_text("my notes")
    (out / "mydata").mkdir()
    before = tree(out)
    checkpoint = root / "data/checkpoints" / TASK / "copynet"
    args = ["--out", str(out), "--params", str(root / "params.yaml")]
    line = export_refused([str(checkpoint), *args], capsys)
    assert "an earlier onnx export that also holds mydata/, notes.txt" in line
    assert tree(out) == before
    shutil.rmtree(out / "mydata")
    (out / "notes.txt").unlink()
    assert export_main([str(checkpoint / "model.pt"), *args]) == 0
    assert sorted(tree(out)) == sorted(own)
    (tmp_path / "in.txt").write_text("a s1 b\n")
    assert (
        predict_main(["--runtime", "onnx", "--model", str(out), "--threads", "1", "--input", str(tmp_path / "in.txt")])
        == 0
    )


@pytest.mark.slow
def test_format_hf_replaces_its_earlier_export_whole(row, tmp_path, capsys) -> None:  # noqa: F811 - the fixture
    """An earlier hf export (only its own names) survives a refused export (a row that is not a copy
    head), and is replaced by a new folder as a whole: its stale shard is gone."""
    from pipeline.training.checkpoints import save_atomic

    checkpoint, vocab_dir = row
    out = fake_hf_export(tmp_path / "hf")
    params = tmp_path / "params.yaml"
    params.write_text(
        "tasks: {toy: data}\nmechanisms: [backbone_copynet, copynet]\nprepare: {toy: {reader: copynet_rules}}\n"
        "evaluate: {beam_size: 4, max_len: 16}\n"
    )
    args = ["--format", "hf", "--out", str(out), "--params", str(params), "--vocab", str(vocab_dir)]
    plain = tmp_path / "checkpoints" / "toy" / "copynet"
    plain.mkdir(parents=True)
    save_atomic({"model": {}, "mechanism": "copynet"}, plain / "model.pt")
    before = tree(out)
    assert "the Hugging Face export supports the copy heads" in export_refused([str(plain), *args], capsys)
    assert tree(out) == before and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert export_main([str(checkpoint), *args]) == 0
    assert not (out / "model-00001-of-00002.safetensors").exists() and (out / "model.safetensors").is_file()
    assert json.loads((out / "config.json").read_text())["model_type"] == "copyseq_copy_head"


# ---------------------------------------------------------------------------------------------
# predict
# ---------------------------------------------------------------------------------------------
def test_predict_refuses_output_equal_to_input_and_keeps_it(tmp_path, capsys) -> None:
    """Before any work (no model, the checkpoint does not exist): the input is never overwritten, also
    when --output reaches it through a symbolic link or a hard link."""
    io_file = tmp_path / "io.txt"
    io_file.write_text("a s1 b\n")
    (tmp_path / "link.txt").symlink_to(io_file)
    os.link(io_file, tmp_path / "hard.txt")
    for output in (io_file, tmp_path / "link.txt", tmp_path / "hard.txt", tmp_path / "." / "io.txt"):
        args = ["--checkpoint", str(tmp_path / "no_model"), "--input", str(io_file), "--output", str(output)]
        line = predict_refused(args, capsys)
        assert f"--input {io_file} and --output {output} are the same file" in line
        assert io_file.read_text() == "a s1 b\n"


def test_predict_names_an_input_it_cannot_read(tmp_path, capsys) -> None:
    """A missing --input or a directory: one line naming --input and the path, no output written."""
    base = ["--checkpoint", str(tmp_path / "no_model"), "--output", str(tmp_path / "out.txt"), "--input"]
    line = predict_refused([*base, str(tmp_path / "missing.txt")], capsys)
    assert line.endswith(f"--input {tmp_path / 'missing.txt'}: no such file")
    line = predict_refused([*base, str(tmp_path)], capsys)
    assert line.endswith(f"--input {tmp_path}: is a directory; give a file, one text a line")
    assert not (tmp_path / "out.txt").exists()


def test_predict_refuses_an_output_it_cannot_write_before_decoding(tmp_path, capsys) -> None:
    """A directory, a path under a file, an unwritable place: named by --output and the user's path
    (never the temporary file beside it), before a model is read (there is none here)."""
    inp = tmp_path / "in.txt"
    inp.write_text("a s1 b\n")
    base = ["--checkpoint", str(tmp_path / "no_model"), "--input", str(inp), "--output"]
    line = predict_refused([*base, str(tmp_path)], capsys)
    assert line.endswith(f"--output {tmp_path}: is a directory; give a file path")
    line = predict_refused([*base, str(inp / "out.txt")], capsys)
    assert line.endswith(f"--output {inp / 'out.txt'}: {inp} is a file, not a directory")
    if Path("/proc/self").is_dir():
        line = predict_refused([*base, "/proc/foo.txt"], capsys)
        assert line.startswith("copyseq predict: error: --output /proc/foo.txt: cannot write there (")
        assert ".tmp" not in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--threads", "100000"], f"--threads must be between 1 and {max_threads()} (this machine's CPUs), got 100000"),
        (["--threads", "-1"], f"--threads must be between 1 and {max_threads()} (this machine's CPUs), got -1"),
        (["--threads", "0"], f"--threads must be between 1 and {max_threads()} (this machine's CPUs), got 0"),
        (["--device", "cuda"], "--device cuda: --runtime onnx decodes on the CPU; --device goes with --checkpoint"),
    ],
    ids=["threads_huge", "threads_negative", "threads_0", "device_cuda"],
)
def test_predict_onnx_refuses_threads_out_of_range_and_a_device(tmp_path, capsys, extra, message) -> None:
    line = predict_refused(["--runtime", "onnx", "--model", str(tmp_path), *extra], capsys)
    assert line == f"copyseq predict: error: {message}"


def test_predict_refuses_settings_it_would_ignore(tmp_path, capsys) -> None:
    line = predict_refused(["--checkpoint", str(tmp_path), "--threads", "2"], capsys)
    assert line.endswith("--threads 2: onnxruntime's threads, for --runtime onnx only")
    line = predict_refused(["--model", "models:/t@champion", "--device", "cuda"], capsys)
    assert "--device cuda: a registered model decodes on the device of its own serving settings" in line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--checkpoint", "C", "--beam", "0"], "--beam must be >= 1, got 0"),
        (["--checkpoint", "C", "--beam", "-3"], "--beam must be >= 1, got -3"),
        (["--checkpoint", "C", "--beam", "abc"], "argument --beam: invalid int value: 'abc'"),
        (["--checkpoint", "C", "--max-len", "0"], "--max-len must be >= 1, got 0"),
        (["--checkpoint", "C", "--model", "M"], "argument --model: not allowed with argument --checkpoint"),
        ([], "one of the arguments --checkpoint --model is required"),
        (["--checkpoint", "C", "--runtime", "onnx"], "--runtime onnx reads an exported model"),
        (["--model", "M", "--task", "t"], "--task/--mechanism/--vocab go with --checkpoint"),
    ],
    ids=["beam_0", "beam_negative", "beam_abc", "max_len_0", "both_models", "no_model", "onnx_checkpoint", "task"],
)
def test_predict_usage_errors_are_one_line(capsys, args, message) -> None:
    assert message in predict_refused(args, capsys)


def test_predict_model_uri_of_another_scheme_names_what_is_accepted(tmp_path, capsys) -> None:
    inp = tmp_path / "in.txt"
    inp.write_text("a s1 b\n")
    line = predict_refused(["--model", "http://127.0.0.1:1/model", "--input", str(inp)], capsys)
    assert line == (
        "copyseq predict: error: --model http://127.0.0.1:1/model: a http: URI is not read here; give "
        "models:/<name>@<alias>, models:/<name>/<version>, runs:/<run_id>/<path> or a model directory"
    )


def test_predict_checkpoint_may_name_its_model_pt(tmp_path, capsys) -> None:
    """--checkpoint .../model.pt reads its directory, as --checkpoint .../ does (the same outputs)."""
    root = write_project(tmp_path, ROW, steps=0)
    checkpoint = root / "data/checkpoints" / TASK / "copynet"
    inp = tmp_path / "in.txt"
    inp.write_text("a s1 b\na u1 b\n")
    outputs = []
    for path in (checkpoint, checkpoint / "model.pt"):
        capsys.readouterr()
        assert (
            predict_main(["--checkpoint", str(path), "--params", str(root / "params.yaml"), "--input", str(inp)]) == 0
        )
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and len(outputs[0].splitlines()) == 2


@pytest.mark.parametrize(
    ("model", "says"),
    [
        (
            "models:/t@champion",
            "models:/t@champion: t has no alias 'champion' (versions: 1, 2; aliases: none); "
            "the compare stage sets the alias champion (copyseq run TASK --compare, or copyseq repro)",
        ),
        ("models:/t@best", "models:/t@best: t has no alias 'best' (versions: 1, 2; aliases: none)"),
        ("models:/t/7", "models:/t/7: t has no version 7 (versions: 1, 2; aliases: none)"),
        (
            "models:/qa@champion",
            "models:/qa@champion: no registered model 'qa' (registered: t); the compare "
            "stage sets the alias champion (copyseq run TASK --compare, or copyseq repro)",
        ),
    ],
    ids=["no_champion_yet", "no_alias", "no_version", "no_model"],
)
def test_predict_of_a_model_the_registry_lacks_names_what_it_holds(tmp_path, monkeypatch, capsys, model, says):
    """MLflow's own line ("Registered model alias champion not found.") names neither the model nor what
    exists; predict names both, and for a champion not yet set, the stage that sets it."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    client.create_registered_model("t")
    for _ in range(2):
        client.create_model_version("t", source=str(tmp_path / "model"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    (tmp_path / "in.txt").write_text("a s1 b\n")
    line = predict_refused(["--model", model, "--input", str(tmp_path / "in.txt")], capsys)
    assert line == f"copyseq predict: error: {says}"
