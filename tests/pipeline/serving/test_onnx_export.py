"""ONNX export of CopyNet (with its selective read) and the pointer-generator (with coverage) on the GRU
decoders: the exported graphs with the numpy search give the PyTorch search's n-best lists and scores
(greedy, beam 1 and 10, every search option), the predictor's outputs, in a process where torch
cannot be imported too; the manifest describes the graphs; an untraceable model is refused; ``--int8``
stores every matrix and embedding weight in 8 bits and answers as the float export on the toy sources.

Tiny models (emb 16, hidden 24) trained for 40 steps on the toy copy task (a second: their outputs
end with </s> at various lengths and copy the unseen fillers), saved as the train stage saves them,
in a project of their own (params.yaml with the rows, vocabularies, checkpoints), exported once per
module through ``pipeline.serving.export.main``.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
import yaml

from pipeline.decoding.decode import decode_table
from pipeline.decoding.search import beam_search, greedy
from pipeline.decoding.settings import EvalConfig
from pipeline.io.files import sha256_file
from pipeline.serving import onnx_search
from pipeline.serving.export import main as export_main
from pipeline.serving.onnx_model import OnnxModel
from pipeline.serving.onnx_predictor import OnnxPredictor, decode_rows, encode_rows
from pipeline.training.checkpoints import save_atomic, vocab_identity
from pipeline.training.loop import nll_loss
from pipeline.vocab.batching import collate
from tests.helpers import REPO, TOY_SEEN, TOY_UNSEEN, toy_copy_batch, toy_copy_example, toy_copy_vocab, toy_model

TASK = "toy_onnx"
PREPARE = {"reader": "copynet_rules"}  # whitespace tokens
EVALUATE = {"beam_size": 10, "max_len": 12, "batch_size": 8}
SIZES = {"emb": 16, "hidden": 24}
# row -> (mechanism, shared model settings, the mechanism's options)
ROWS = {
    "copynet": ("copynet", {}, {}),
    "pointer_generator": ("pointer_generator", {}, {"coverage": True}),
}
TOLERANCE = 1e-4  # scores of the same hypothesis, PyTorch against onnxruntime


def briefly_trained(model, steps: int = 40):
    """``model`` after ``steps`` Adam steps on toy copy batches, in eval mode."""
    rng = random.Random(0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        _, batch = toy_copy_batch(rng, TOY_SEEN, 32, 0.1)
        loss, _ = nll_loss(model, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def write_project(root: Path, rows: dict, steps: int = 40) -> Path:
    """A project under ``root``: params.yaml naming ``rows`` (variants where a row is not its
    mechanism), the toy vocabulary, and each row's model, trained ``steps`` steps, saved as the train
    stage saves it."""
    vocab = toy_copy_vocab()
    vocab_dir = root / "data/vocab" / TASK
    vocab_dir.mkdir(parents=True, exist_ok=True)
    vocab.save(vocab_dir / "src.vocab")
    vocab.save(vocab_dir / "tgt.vocab")
    variants = {}
    for row, (mech, shared, options) in rows.items():
        model = toy_model(mech, vocab, vocab, seed=1, scale=1.0, config={**SIZES, **shared}, **options)
        model = briefly_trained(model, steps) if steps else model
        if row != mech:
            variants[row] = {"mechanism": mech, "model": shared}
        info = {"mechanism": mech, "vocab": {"src": vocab_identity(vocab), "tgt": vocab_identity(vocab)}}
        if row != mech:
            info["variant"] = row
        path = root / "data/checkpoints" / TASK / row / "model.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        save_atomic({"model": model.state_dict(), "model_config": vars(model.cfg), **info}, path)
    params = {
        "tasks": {TASK: "data"},
        "mechanisms": list(rows),
        "prepare": {TASK: PREPARE},
        "model": SIZES,
        "evaluate": EVALUATE,
        "tracking": {"experiment_prefix": ""},
    }
    if variants:
        params["variants"] = variants
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return root


def export_rows(root: Path, rows: dict, folder: str = "exports", options: tuple[str, ...] = ()) -> dict[str, Path]:
    """Each row exported with ``copyseq export``'s code (and ``options``) under ``root/folder``; the
    export directories by row."""
    out = {}
    for row in rows:
        out[row] = root / folder / row
        args = [
            str(root / "data/checkpoints" / TASK / row),
            "--out",
            str(out[row]),
            "--params",
            str(root / "params.yaml"),
            *options,
        ]
        assert export_main(args) == 0
    return out


def sources(n: int = 24, seed: int = 0) -> list[list[str]]:
    """Toy sources ``a X b``: seen fillers, unseen ones (decoder OOVs), repeats of an OOV."""
    rng = random.Random(seed)
    out = [toy_copy_example(rng, TOY_SEEN if i % 3 == 0 else TOY_UNSEEN)[0] for i in range(n)]
    out[1] = ["a", "u1", "u2", "u1", "s3", "u1", "b"]  # an OOV three times: its copy mass merges
    return out


def torch_model(root: Path, row: str):
    from pipeline.training.checkpoints import load_model

    model, _ = load_model(root / "data/checkpoints" / TASK / row / "model.pt", row, "cpu")
    return model


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    root = write_project(tmp_path_factory.mktemp("onnx_project"), ROWS)
    return root, export_rows(root, ROWS)


def assert_same_nbest(want: list, got: list) -> None:
    """The same hypotheses (extended ids) in the same order, scores within TOLERANCE."""
    for b, (w, g) in enumerate(zip(want, got, strict=True)):
        assert [h.ids for h in g] == [h.ids for h in w], b
        assert np.allclose([h.score for h in g], [h.score for h in w], atol=TOLERANCE, rtol=0), b
        assert np.allclose([h.rank_score for h in g], [h.rank_score for h in w], atol=TOLERANCE, rtol=0), b


def assert_same_greedy(want: list, got: list) -> None:
    """Greedy outputs: the same ids, scores within TOLERANCE."""
    assert [h.ids for h in got] == [h.ids for h in want]
    assert np.allclose([h.score for h in got], [h.score for h in want], atol=TOLERANCE, rtol=0)


def both_batches(srcs: list[list[str]]):
    vocab = toy_copy_vocab()
    batch = collate(srcs, None, vocab, vocab)
    inputs, _, _, n_ext = encode_rows(srcs, vocab, vocab)
    assert n_ext == batch.n_ext and (inputs["src_ext"] == batch.src_ext.numpy()).all()
    return batch, inputs, n_ext


# ---------------------------------------------------------------------------------------------
# Search: numpy over onnxruntime against PyTorch
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("beam", [1, 10])
def test_beam_search_nbest_equals_pytorch(project, row, beam) -> None:
    root, exports = project
    batch, inputs, n_ext = both_batches(sources())
    want = beam_search(torch_model(root, row), batch, beam, 12)
    got = onnx_search.beam_search(OnnxModel(exports[row], threads=1), inputs, n_ext, beam, 12)
    assert_same_nbest(want, got)
    assert sum(len(h) for h in got) == beam * len(got)  # a full n-best list per example
    assert len({len(h[0].ids) for h in got}) > 2  # best outputs of several lengths, ended by </s>


@pytest.mark.parametrize("row", ROWS)
def test_greedy_equals_pytorch(project, row) -> None:
    root, exports = project
    for srcs in (sources(), [["a", "s1", "s2", "b"], ["a", "s3", "b"]]):  # the second batch has no OOV: X = 0
        batch, inputs, n_ext = both_batches(srcs)
        want = greedy(torch_model(root, row), batch, 12)
        got = onnx_search.greedy(OnnxModel(exports[row], threads=1), inputs, n_ext, 12)
        assert_same_greedy(want, got)


@pytest.mark.parametrize(
    "options",
    [
        {"min_len": 4, "block_ngram": 2, "ban_unk": True},
        {"alpha": 0.8, "keep_attention": True},
    ],
    ids=["min_len-block_ngram-ban_unk", "length_penalty-attention"],
)
def test_search_options_equal_pytorch(project, options) -> None:
    root, exports = project
    batch, inputs, n_ext = both_batches(sources(12, seed=3))
    torch_options = {("length_penalty" if k == "alpha" else k): v for k, v in options.items()}
    want = beam_search(torch_model(root, "copynet"), batch, 6, 12, **torch_options)
    got = onnx_search.beam_search(OnnxModel(exports["copynet"], threads=1), inputs, n_ext, 6, 12, **options)
    assert_same_nbest(want, got)
    if options.get("keep_attention"):
        for w, g in zip(want, got):
            for hw, hg in zip(w, g):
                assert np.allclose(hg.trace["attn"], hw.trace["attn"].numpy(), atol=1e-5)
    if options.get("block_ngram"):
        for hyps in got:
            for h in hyps:
                pairs = list(zip(h.ids, h.ids[1:]))
                assert len(pairs) == len(set(pairs))  # no bigram twice


def test_step_distribution_sums_to_one_and_merges_repeated_copies(project) -> None:
    """Each step's probabilities over V + X sum to 1; an OOV that is three times in the source gets
    the copy mass of all three positions (ScatterElements' sum), none on the slots past its row's OOVs."""
    _, exports = project
    model = OnnxModel(exports["copynet"], threads=1)
    srcs = [["a", "u1", "u2", "u1", "s3", "u1", "b"], ["a", "s1", "b"]]
    _, inputs, n_ext = both_batches(srcs)
    state = model.encode(inputs)
    log_probs, _ = model.step(state, np.array([2, 2]), n_ext)
    probs = np.exp(log_probs.astype(np.float64))
    assert log_probs.shape == (2, len(toy_copy_vocab()) + 2)
    assert np.allclose(probs.sum(1), 1.0, atol=1e-5)
    assert probs[1, len(toy_copy_vocab()) :].max() < 1e-30  # row 1 has no OOV


@pytest.mark.parametrize("row", ROWS)
def test_decode_records_and_predictor_equal_pytorch(project, row) -> None:
    """decode_table's records (the evaluate stage's: nbest, scores, copied) and the predictor's outputs."""
    from pipeline.serving.pyfunc import local_model

    root, exports = project
    vocab = toy_copy_vocab()
    srcs = sources(20, seed=5)
    table = pa.table(
        {
            "id": [str(i) for i in range(len(srcs))],
            "src": pa.array(srcs, pa.list_(pa.string())),
            "tgt": pa.array([[] for _ in srcs], pa.list_(pa.string())),
        }
    )
    cfg = EvalConfig.from_dict({**EVALUATE, "replace_unk": True})
    want = decode_table(torch_model(root, row), table, vocab, vocab, cfg, torch.device("cpu"))
    got = decode_rows(OnnxModel(exports[row], threads=1), srcs, vocab, vocab, cfg)
    for w, g in zip(want, got, strict=True):
        assert g["nbest"] == w["nbest"] and g["copied"] == w["copied"] and g["pred"] == w["pred"]
        assert np.allclose(g["scores"], w["scores"], atol=TOLERANCE + 1e-4)  # both rounded to 4 places
    texts = [" ".join(s) for s in srcs]
    from pipeline.serving.predictor import ServingConfig

    config = ServingConfig.from_params(TASK, row, PREPARE, EVALUATE)
    torch_rows = local_model(root / "data/checkpoints" / TASK / row, root / "data/vocab" / TASK, config)
    frame = torch_rows.python_model.predictor.predict(texts)
    onnx_rows = OnnxPredictor(exports[row], threads=1).predict(texts)
    for w, g in zip(frame, onnx_rows, strict=True):
        assert (g["output"], g["tokens"], g["copied"], g["warning"]) == (
            w["output"],
            w["tokens"],
            w["copied"],
            w["warning"],
        )
        assert abs(g["score"] - w["score"]) <= TOLERANCE + 1e-4
    assert any(r["copied"] for r in onnx_rows)  # the OOV fillers are copied by some outputs


# ---------------------------------------------------------------------------------------------
# The export's files
# ---------------------------------------------------------------------------------------------
def test_manifest_describes_the_graphs(project) -> None:
    import onnx

    root, exports = project
    out = exports["pointer_generator"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["opset"] >= 17 and manifest["mechanism"] == "pointer_generator"
    assert manifest["source"]["sha256"] == sha256_file(root / "data/checkpoints" / TASK / "pointer_generator/model.pt")
    assert manifest["decoding"]["beam_size"] == 10 and manifest["decoding"]["max_len"] == 12
    assert manifest["state"]["recurrent"] == ["s", "context", "coverage"]
    step = manifest["graphs"]["step"]
    inputs = {s["name"]: s["shape"] for s in step["inputs"]}
    assert inputs["prev_ids"] == ["batch"] and inputs["ext_slots"] == ["ext"]
    assert inputs["state.memory"] == ["batch", "src", 2 * SIZES["hidden"]] and inputs["state.coverage"] == [
        "batch",
        "src",
    ]
    outputs = {s["name"]: s["shape"] for s in step["outputs"]}
    assert outputs["log_probs"] == ["batch", "vocab_ext"] and outputs["next.coverage"] == ["batch", "src"]
    for name, graph in manifest["graphs"].items():
        proto = onnx.load(str(out / graph["file"]))
        assert [i.name for i in proto.graph.input] == [s["name"] for s in graph["inputs"]], name
        assert [o.name for o in proto.graph.output] == [s["name"] for s in graph["outputs"]], name
        assert max(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")) == manifest["opset"]
        assert sha256_file(out / graph["file"]) == graph["sha256"]
    serving = json.loads((out / "serving.json").read_text())
    assert sha256_file(out / "weights.bin") == manifest["weights"]["sha256"]
    assert set(serving["files"]) == {
        "encoder.onnx",
        "step.onnx",
        "weights.bin",
        "src.vocab",
        "tgt.vocab",
        "manifest.json",
    }
    assert manifest["check"]["max_abs_log_prob_diff"] < 1e-4


# ---------------------------------------------------------------------------------------------
# --int8: the matrix and embedding weights stored as int8
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def int8_exports(project) -> dict[str, Path]:
    root, _ = project
    return export_rows(root, ROWS, "exports_int8", ("--int8",))


def large_weights(proto, node) -> list:
    """The initializers of 1 KB or more that ``node`` reads, as numpy arrays."""
    from onnx import numpy_helper

    inits = {t.name: t for t in proto.graph.initializer}
    arrays = [numpy_helper.to_array(inits[name]) for name in node.input if name in inits]
    return [a for a in arrays if a.nbytes >= 1024]


@pytest.mark.parametrize("row", ROWS)
def test_int8_stores_every_matrix_and_embedding_weight_in_8_bits(project, int8_exports, row) -> None:
    import onnx

    _, exports = project
    for graph in ("encoder.onnx", "step.onnx"):
        before = onnx.load(str(exports[row] / graph))
        after = onnx.load(str(int8_exports[row] / graph))
        quantized = [n for n in before.graph.node if n.op_type in ("MatMul", "Gather") and large_weights(before, n)]
        assert quantized, graph  # each graph has such weights to quantize
        for node in after.graph.node:
            if node.op_type in ("MatMul", "Gather", "MatMulInteger"):
                weights = large_weights(after, node)
                assert all(w.dtype.itemsize == 1 for w in weights), (graph, node.name)
                # |w| <= 64: x86 CPUs without VNNI cannot saturate (onnx_quantize.REDUCE_RANGE)
                assert all(-64 <= w.min() and w.max() <= 64 for w in weights if w.dtype == np.int8), node.name
        assert sum(n.op_type == "MatMulInteger" for n in after.graph.node) >= 1, graph
    float_bytes = (exports[row] / "weights.bin").stat().st_size
    int8_bytes = (int8_exports[row] / "weights.bin").stat().st_size
    assert int8_bytes < 0.6 * float_bytes, (int8_bytes, float_bytes)


@pytest.mark.parametrize("row", ROWS)
def test_int8_export_records_its_distance_and_answers_as_its_float_twin(project, int8_exports, row) -> None:
    _, exports = project
    manifest = json.loads((int8_exports[row] / "manifest.json").read_text())
    q = manifest["quantization"]
    assert q["weights"] == "int8" and q["ops"] == ["MatMul", "Gather", "LSTM"] and q["per_channel"] is True
    assert q["reduce_range"] is True
    assert manifest["check"]["max_abs_log_prob_diff"] < 1e-4  # the float graphs, checked before quantizing
    assert 1e-4 < q["max_abs_log_prob_diff"] < 1.0  # int8 moves the log-probabilities, a little
    assert q["same_first_word"] >= 0.9
    assert json.loads((exports[row] / "manifest.json").read_text())["quantization"] is None
    texts = [" ".join(s) for s in sources(48, seed=7)]
    want = OnnxPredictor(exports[row], threads=1).predict(texts)
    got = OnnxPredictor(int8_exports[row], threads=1).predict(texts)
    same = sum(g["output"] == w["output"] for g, w in zip(got, want, strict=True))
    assert same >= 0.9 * len(texts), same
    assert any(r["copied"] for r in got)  # the unseen fillers are still copied


def test_int8_is_refused_for_a_hugging_face_folder(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        export_main([str(tmp_path), "--out", str(tmp_path / "out"), "--format", "hf", "--int8"])
    assert exit_.value.code == 2 and "--int8 quantizes an ONNX export (--format onnx)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_changed_file_is_refused(project, tmp_path) -> None:
    import shutil

    _, exports = project
    copy = tmp_path / "copy"
    shutil.copytree(exports["copynet"], copy)
    with open(copy / "tgt.vocab", "a", encoding="utf-8") as f:
        f.write("extra\t1\n")
    with pytest.raises(ValueError, match="tgt.vocab: sha256 differs"):
        OnnxPredictor(copy)


def test_an_untraceable_model_is_refused_in_one_line(tmp_path, capsys) -> None:
    """Read-Again over sentences whose end token is outside the source vocabulary (the graph finds
    sentence ends by source ids): refused through the command, in one line, nothing written."""
    settings = {"sentences": "opt1", "sentence_end": ["."]}
    root = write_project(tmp_path, {"read_again": ("read_again", {}, settings)}, steps=0)
    args = [
        str(root / "data/checkpoints" / TASK / "read_again"),
        "--out",
        str(tmp_path / "out"),
        "--params",
        str(root / "params.yaml"),
    ]
    assert export_main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("copyseq export: error:")
    assert "model.read_again.sentences opt1" in err and "supported: CopyNet, the pointer-generator" in err
    assert not (tmp_path / "out").exists()


def test_graphs_that_onnxruntime_cannot_run_on_the_check_are_refused_in_one_line(tmp_path, capsys, monkeypatch) -> None:
    """Graphs traced with every size fixed (no dynamic axes) fail in onnxruntime on the check's other
    sizes: the command refuses them in one line naming onnxruntime's reason, and writes nothing."""
    from pipeline.serving import onnx_graphs

    monkeypatch.setattr(onnx_graphs, "_dynamic_shapes", lambda specs, dims: [{} for _ in specs])
    root = write_project(tmp_path, {"copynet": ("copynet", {}, {})}, steps=0)
    args = [str(root / "data/checkpoints" / TASK / "copynet"), "--out", str(tmp_path / "out")]
    assert export_main([*args, "--params", str(root / "params.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("copyseq export: error:")
    assert "the float32 ONNX graphs of this copynet model do not run on the check's inputs" in err
    assert "INVALID_ARGUMENT" in err and "Got invalid dimensions for input" in err
    assert not (tmp_path / "out").exists()


def test_an_out_directory_that_is_not_an_export_is_refused_and_kept(tmp_path, capsys) -> None:
    """--out names a directory of the user's: refused before any work, every file kept."""
    root = write_project(tmp_path, {"copynet": ("copynet", {}, {})}, steps=0)
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    args = [str(root / "data/checkpoints" / TASK / "copynet"), "--out", str(out), "--params", str(root / "params.yaml")]
    for fmt in ("onnx", "hf"):
        assert export_main([*args, "--format", fmt]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"is not an earlier {fmt} export" in err
        assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "keep me"
    assert export_main(args) == 2 and (out / "notes.txt").read_text() == "keep me"


# ---------------------------------------------------------------------------------------------
# Without torch
# ---------------------------------------------------------------------------------------------
NO_TORCH = '''
import importlib.abc, importlib.machinery, os, sys

BLOCKED = os.environ["BLOCKED_MODULES"].split(",")

class Hidden(importlib.abc.MetaPathFinder):
    """The path finder, blind to BLOCKED_MODULES: in this process they are not installed (`import torch`
    fails, `importlib.util.find_spec("torch")` is None, as libraries that probe for torch expect)."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            return None
        return importlib.machinery.PathFinder.find_spec(name, path, target)

    def find_distributions(self, *args, **kwargs):  # importlib.metadata: the installed packages' metadata
        for dist in importlib.machinery.PathFinder.find_distributions(*args, **kwargs):
            if (dist.metadata["Name"] or "").lower() not in BLOCKED:
                yield dist

    def invalidate_caches(self):
        importlib.machinery.PathFinder.invalidate_caches()

sys.meta_path[:] = [Hidden() if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
'''


def run_without_torch(
    tmp_path: Path, args: list[str], stdin: str = "", blocked: tuple[str, ...] = ("torch",)
) -> subprocess.CompletedProcess:
    shim = tmp_path / "no_torch"
    shim.mkdir(exist_ok=True)
    (shim / "sitecustomize.py").write_text(NO_TORCH)
    env = {**__import__("os").environ, "PYTHONPATH": f"{shim}:{REPO}", "BLOCKED_MODULES": ",".join(blocked)}
    return subprocess.run(
        [sys.executable, *args], input=stdin, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300
    )


def test_the_onnx_path_runs_where_torch_cannot_be_imported(project, tmp_path) -> None:
    """`predict --runtime onnx` and the numpy search in a process where `import torch` fails: the
    PyTorch predictor's outputs, and the PyTorch search's n-best lists."""
    root, exports = project
    blocked = run_without_torch(
        tmp_path, ["-c", "import importlib.util; print(importlib.util.find_spec('torch')); import torch"]
    )
    assert blocked.returncode == 1 and blocked.stdout == "None\n" and "No module named 'torch'" in blocked.stderr
    srcs = sources(10, seed=7)
    text = "".join(" ".join(s) + "\n" for s in srcs)
    # an export directory needs neither MLflow nor pandas either (the cold start and memory of bench_export)
    proc = run_without_torch(
        tmp_path,
        ["-m", "pipeline.serving.predict", "--runtime", "onnx", "--model", str(exports["copynet"])],
        text,
        blocked=("torch", "mlflow", "pandas"),
    )
    assert proc.returncode == 0, proc.stderr
    from pipeline.serving.onnx_model import MANIFEST
    from pipeline.serving.predict import EXPORT_MANIFEST
    from pipeline.serving.predictor import ServingConfig

    assert EXPORT_MANIFEST == MANIFEST  # how predict tells an export directory without importing onnxruntime
    from pipeline.serving.pyfunc import local_model

    config = ServingConfig.from_params(TASK, "copynet", PREPARE, EVALUATE)
    want = local_model(root / "data/checkpoints" / TASK / "copynet", root / "data/vocab" / TASK, config)
    assert proc.stdout.splitlines() == list(want.predict([" ".join(s) for s in srcs])["output"])

    code = textwrap.dedent(
        f"""
        import json, sys
        from pipeline.serving.onnx_model import OnnxModel
        from pipeline.serving.onnx_predictor import encode_rows
        from pipeline.serving.onnx_search import beam_search
        from pipeline.vocab.vocabulary import Vocab
        vocab = Vocab.load({str(exports["copynet"] / "tgt.vocab")!r})
        inputs, _, _, n_ext = encode_rows(json.loads(sys.stdin.read()), vocab, vocab)
        hyps = beam_search(OnnxModel({str(exports["copynet"])!r}, threads=1), inputs, n_ext, 10, 12)
        print(json.dumps([[(h.ids, h.score) for h in row] for row in hyps]))
        assert "torch" not in sys.modules
        """
    )
    proc = run_without_torch(tmp_path, ["-c", code], json.dumps(srcs))
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    batch = collate(srcs, None, toy_copy_vocab(), toy_copy_vocab())
    want = beam_search(torch_model(root, "copynet"), batch, 10, 12)
    assert [[ids for ids, _ in row] for row in got] == [[h.ids for h in row] for row in want]
    assert np.allclose([s for row in got for _, s in row], [h.score for row in want for h in row], atol=TOLERANCE)


# ---------------------------------------------------------------------------------------------
# The search's own pieces against pipeline.decoding's
# ---------------------------------------------------------------------------------------------
def test_top_k_and_ngram_blocking_equal_pipeline_decoding() -> None:
    from pipeline.decoding.search import _block_ngrams
    from pipeline.decoding.top_k import top_k_by_sort

    rng = np.random.default_rng(0)
    for shape in ((4, 700), (3, 5000), (2, 64 * 80)):  # sorted whole; chunks and a short last one; whole chunks
        scores = rng.integers(-5, 3, size=shape).astype(np.float32)  # many ties, across chunks too
        values, index = onnx_search.top_k(scores, 10)
        want_values, want_index = top_k_by_sort(torch.from_numpy(scores), 10)
        assert (index == want_index.numpy()).all() and (values == want_values.numpy()).all(), shape
    history = rng.integers(4, 9, size=(6, 9))
    log_probs = rng.normal(size=(6, 12)).astype(np.float32)
    for n in (0, 2, 3):
        want = _block_ngrams(torch.from_numpy(log_probs), torch.from_numpy(history), n).numpy()
        assert (onnx_search.block_ngrams(log_probs, history, n) == want).all()
