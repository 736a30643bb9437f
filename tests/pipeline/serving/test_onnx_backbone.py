"""ONNX export of the copy heads on pretrained backbones (pipeline/serving/onnx_backbone.py) on tiny BART,
T5 and Marian backbones made here (no network): the encoder graph gives the decoder's cross-attention
keys and values (static) and empty self-attention caches, each exported step equals PyTorch's ``step``
(log-probabilities, the copy attention) while the caches grow one position a step, and greedy and beam-4
n-best lists through the numpy search over onnxruntime equal the PyTorch search's.

One export takes 20-30 s on two cores, so the cases cover every head once and every backbone at least
once (four exports), not the whole grid of heads x backbones."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
import transformers
from onnx import numpy_helper

from models.extended import NEG
from models.registry import build_model, model_config
from models.specials import BOS
from pipeline.decoding.search import beam_search, greedy
from pipeline.serving import onnx_search
from pipeline.serving.onnx_backbone import export_backbone_graphs
from pipeline.serving.onnx_graphs import probe_batch, probe_inputs
from pipeline.serving.onnx_model import FORMAT, MANIFEST, OnnxModel
from pipeline.vocab.batching import collate
from pipeline.vocab.tokenizer import BackboneTokenizer
from tests.helpers import tiny_backbones
from tests.pipeline.serving.test_hf_export import HEAD as HF_HEAD
from tests.pipeline.serving.test_hf_export import row  # noqa: F401 - the fixture
from tests.pipeline.serving.test_hf_export import sources as hf_sources
from tests.pipeline.serving.test_onnx_export import TOLERANCE, assert_same_greedy, assert_same_nbest

LAYERS = 2
HEADS = {
    "backbone_pointer_generator": {"coverage": True},
    "backbone_copynet": {},
    "backbone_pointer_softmax": {},
    "backbone_lm": {},
}
GRID = [  # each head once, each backbone at least once
    pytest.param(kind, head, id=f"{kind}-{head}")
    for kind, head in (
        ("bart", "backbone_pointer_generator"),
        ("t5", "backbone_copynet"),
        ("marian", "backbone_pointer_softmax"),
        ("marian", "backbone_lm"),
    )
]
# "U", "W" and "Z" never occur in the tokenizers' text: their pieces are <unk>, the sources' extended ids.
SOURCES = ["a s1 U7 s2 U7 b", "a s3 s3 b", "a W2 b", "a s4 s40 s12 Z3 U b", "a s5 b"]


@pytest.fixture(autouse=True, scope="module")
def quiet():
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


@pytest.fixture(scope="module")
def backbones(tmp_path_factory) -> dict:
    """kind -> (directory, its tokenizer as the vocab stage reads it)."""
    return tiny_backbones(tmp_path_factory.mktemp("onnx_backbones"), layers=LAYERS)


def write_manifest(out: Path, specs, tgt_vocab: int) -> None:
    """What OnnxModel reads of the manifest ``copyseq export`` writes."""
    manifest = {
        "format": FORMAT,
        "graphs": {"encoder": {"file": "encoder.onnx"}, "step": {"file": "step.onnx"}},
        "state": {"keys": list(specs.keys), "recurrent": list(specs.recurrent)},
        "vocab": {"tgt_size": tgt_vocab},
    }
    (out / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")


@pytest.fixture(scope="module")
def exported(backbones, tmp_path_factory):
    """(kind, head) -> (the PyTorch model in eval mode, its export directory, the graphs' specs), each
    exported once."""
    done = {}

    def get(kind: str, head: str):
        if (kind, head) not in done:
            path, tok = backbones[kind]
            torch.manual_seed(0)
            size = len(tok.vocab)
            cfg = model_config({"backbone": str(path), head: HEADS[head]}, head, src_vocab=size, tgt_vocab=size)
            model = build_model(head, cfg).eval()
            out = tmp_path_factory.mktemp(f"{kind}_{head}")
            specs = export_backbone_graphs(model, out)
            write_manifest(out, specs, size)
            done[kind, head] = (model, out, specs)
        return done[kind, head]

    return get


@pytest.mark.parametrize(("kind", "head"), GRID)
@torch.no_grad()
def test_each_step_equals_pytorch_as_the_cache_grows(exported, kind, head) -> None:
    """On batches of other sizes than the traced ones, eight steps fed PyTorch's best word: log p over
    V + X within 1e-4 of ``step``'s (a distribution: it sums to 1), the copy attention equal, the
    self-attention caches one position longer each step, the cross-attention ones the encoder's,
    never a step output."""
    model, out, specs = exported(kind, head)
    assert {f"bb_cross_{kv}{i}" for kv in "kv" for i in range(LAYERS)} <= set(specs.keys) - set(specs.recurrent)
    assert {f"bb_self_{kv}{i}" for kv in "kv" for i in range(LAYERS)} <= set(specs.recurrent)
    onnx_model = OnnxModel(out, threads=1)
    for seed, (rows, length, n_ext) in enumerate(((1, 6, 1), (4, 9, 2))):
        src, src_len, src_ext, _ = probe_inputs(model, rows, length, n_ext, seed + 10)
        state = model.encode(probe_batch(src, src_len, src_ext, n_ext))
        onnx_state = onnx_model.encode({"src": src.numpy(), "src_len": src_len.numpy(), "src_ext": src_ext.numpy()})
        assert onnx_state["bb_self_k0"].shape[2] == 0
        cross = onnx_state["bb_cross_k1"].copy()
        prev = torch.full((rows,), BOS, dtype=torch.long)
        for t in range(8):
            log_probs, state = model.step(state, prev)
            got, updates = onnx_model.step(onnx_state, prev.numpy(), n_ext)
            onnx_state.update(updates)
            want = log_probs.numpy()
            live = want > NEG / 2
            assert got.shape == want.shape == (rows, model.cfg.tgt_vocab + n_ext)
            assert np.abs(got[live] - want[live]).max() < TOLERANCE, t
            assert np.allclose(np.exp(got.astype(np.float64)).sum(axis=1), 1.0, atol=1e-5)
            assert np.abs(updates["attn"] - state["attn"].numpy()).max() < TOLERANCE
            assert updates["bb_self_v1"].shape[2] == t + 1
            assert np.abs(updates["bb_self_v1"] - state["bb_self_v1"].numpy()).max() < TOLERANCE
            assert "bb_cross_k1" not in updates
            assert np.abs(cross - state["bb_cross_k1"].numpy()).max() < TOLERANCE
            prev = log_probs.argmax(-1)


CROSS_KV = ("encoder_attn.k_proj.", "encoder_attn.v_proj.", "EncDecAttention.k.", "EncDecAttention.v.")


def digests(array: np.ndarray) -> set[str]:
    """The sha256 of a matrix's float32 bytes, and of its transpose's (how the exporter may store it)."""
    array = np.asarray(array, dtype=np.float32)
    return {hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest() for a in (array, array.T)}


@pytest.mark.parametrize(("kind", "head"), GRID)
def test_the_encoder_graph_holds_no_decoder_weight_past_the_cross_attention(exported, kind, head) -> None:
    """The encoder graph runs the decoder only as far as its cross-attention keys and values (projections
    of the encoder states): none of the decoder's other matrices (self-attention, feed-forward, positions,
    an output layer of its own) is in it, so they are neither stored twice nor run once per source."""
    model, out, _ = exported(kind, head)
    matrices = {n: digests(p.detach().numpy()) for n, p in model.named_parameters() if p.dim() == 2}
    # what the encoder side holds too: a tied embedding, Marian's sinusoidal positions (the same table)
    encoder_side = {d for n, ds in matrices.items() if "decoder." not in n for d in ds}
    decoder = {n: ds for n, ds in matrices.items() if "decoder." in n and not any(k in n for k in CROSS_KV)}
    forbidden = {d: n for n, ds in decoder.items() if not ds & encoder_side for d in ds}
    assert len(set(forbidden.values())) >= 4 * LAYERS  # every layer's self-attention and feed-forward at least
    graph = onnx.load(str(out / "encoder.onnx")).graph
    stored = {d: init.name for init in graph.initializer for d in digests(numpy_helper.to_array(init))}
    assert not {stored[d]: name for d, name in forbidden.items() if d in stored}
    cross = [p for n, p in model.named_parameters() if any(k in n for k in CROSS_KV) and p.dim() == 2]
    assert len(cross) == 2 * LAYERS  # each layer's key and value projections: in the graph
    assert all(digests(p.detach().numpy()) & set(stored) for p in cross)


def external_segments(graph_path: Path) -> dict[str, tuple[int, int]]:
    """Each initializer of a graph stored in the shared weights file: name -> (offset, length)."""
    proto = onnx.load(str(graph_path), load_external_data=False)
    return {
        init.name: (int(info["offset"]), int(info["length"]))
        for init in proto.graph.initializer
        if init.data_location == onnx.TensorProto.EXTERNAL
        for info in [{e.key: e.value for e in init.external_data}]
        if info["location"] == "weights.bin"
    }


@pytest.mark.parametrize(("kind", "head"), GRID)
def test_the_shared_embedding_is_stored_once_for_both_graphs(exported, kind, head) -> None:
    """Both graphs keep their weights in weights.bin; the embedding both use (the backbone's shared
    one) is one segment of it, which both graphs point at, and no two segments hold the same bytes."""
    model, out, _ = exported(kind, head)
    encoder, step = external_segments(out / "encoder.onnx"), external_segments(out / "step.onnx")
    data = (out / "weights.bin").read_bytes()
    segments = set(encoder.values()) | set(step.values())
    contents = [hashlib.sha256(data[o : o + n]).hexdigest() for o, n in segments]
    assert len(set(contents)) == len(contents)  # nothing stored twice
    embedding = model.net.get_input_embeddings().weight.detach().numpy()
    shared = [seg for seg in set(encoder.values()) & set(step.values()) if seg[1] == embedding.nbytes]
    assert len(shared) == 1
    offset, length = shared[0]
    assert hashlib.sha256(data[offset : offset + length]).hexdigest() in digests(embedding)
    # the file holds each segment once, each on a page boundary: no more than their sum and the padding
    assert len(data) <= sum(n for _, n in segments) + 4096 * len(segments)


def both_batches(tok: BackboneTokenizer, texts: list[str]):
    """The pipeline's batch of ``texts`` (the tokenizer's pieces) and the encoder graph's inputs."""
    batch = collate(tok.pieces(texts), None, tok.vocab, tok.vocab)
    inputs = {"src": batch.src.numpy(), "src_len": batch.src_len.numpy(), "src_ext": batch.src_ext.numpy()}
    assert batch.n_ext >= 2  # the pieces of "U", "W", "Z": copies only the extended vocabulary holds
    return batch, inputs, batch.n_ext


@pytest.mark.parametrize(("kind", "head"), GRID)
def test_greedy_and_beam_nbest_equal_pytorch(backbones, exported, kind, head) -> None:
    """The numpy search over the graphs gives PyTorch's hypotheses (extended ids) in its order, scores
    within 1e-4: greedy, and beam 4 with a length penalty and n-gram blocking."""
    model, out, _ = exported(kind, head)
    onnx_model = OnnxModel(out, threads=1)
    batch, inputs, n_ext = both_batches(backbones[kind][1], SOURCES)
    with torch.no_grad():
        want = greedy(model, batch, 10)
    got = onnx_search.greedy(onnx_model, inputs, n_ext, 10)
    assert_same_greedy(want, got)
    with torch.no_grad():  # beam 4, max_len 10, min_len 2, length penalty 0.6, no repeated bigram
        want = beam_search(model, batch, 4, 10, 2, 0.6, 2)
    got = onnx_search.beam_search(onnx_model, inputs, n_ext, 4, 10, 2, 0.6, 2)
    assert_same_nbest(want, got)
    assert all(len(hyps) == 4 for hyps in got)


@pytest.fixture(scope="module")
def row_export(row, tmp_path_factory):  # noqa: F811
    """``copyseq export CHECKPOINT --out DIR`` of the trained backbone row: (checkpoint, vocabulary
    directory, export directory, its ServingConfig)."""
    from pipeline.serving.export import main as export_main
    from pipeline.serving.predictor import ServingConfig

    checkpoint, vocab_dir = row
    root = tmp_path_factory.mktemp("backbone_export")
    params = root / "params.yaml"
    evaluate = {"beam_size": 4, "max_len": 16}
    settings = {"tasks": {"toy": "data"}, "mechanisms": [HF_HEAD], "prepare": {"toy": {"reader": "copynet_rules"}}}
    params.write_text(json.dumps({**settings, "evaluate": evaluate}), encoding="utf-8")  # JSON is YAML
    out = root / "onnx"
    args = [str(checkpoint), "--out", str(out), "--params", str(params), "--vocab", str(vocab_dir)]
    assert export_main(args) == 0
    config = ServingConfig(task="toy", mechanism=HF_HEAD, prepare={"reader": "copynet_rules"}, beam_size=4, max_len=16)
    return checkpoint, vocab_dir, out, config


def test_copyseq_export_of_a_backbone_row_answers_as_the_pytorch_predictor(row_export):
    """``copyseq export CHECKPOINT --out DIR`` of a CopyNet row on a tiny BART (trained, 10% of its fillers
    outside the tokenizer's vocabulary): the folder holds the tokenizer, its own check passed, and
    OnnxPredictor gives the PyTorch Predictor's texts, pieces, warnings and scores (within 1e-4) on
    sources with unseen words. ``copied`` lists the copied pieces outside the vocabulary, a subset of
    the PyTorch predictor's (which also lists known pieces mostly copied)."""
    from pipeline.serving.onnx_predictor import OnnxPredictor
    from pipeline.serving.predictor import Predictor
    from pipeline.vocab.tokenizer import RECORD, TOKENIZER_DIR

    checkpoint, vocab_dir, out, config = row_export
    assert (out / RECORD).is_file() and (out / TOKENIZER_DIR).is_dir()
    manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    assert manifest["check"]["max_abs_log_prob_diff"] <= 1e-3
    torch_side = Predictor(
        checkpoint / "model.pt", vocab_dir / "src.vocab", vocab_dir / "tgt.vocab", config, backbone_tokenizer=vocab_dir
    )
    onnx_side = OnnxPredictor(out, threads=1)
    texts = [*hf_sources(), "", "WZUW ZW"]  # the last: 6 of its 8 pieces unknown
    want, got = torch_side.predict(texts), onnx_side.predict(texts)
    assert any(w["copied"] for w in want)  # the row copies: the check below is not vacuous
    for w, g in zip(want, got, strict=True):
        assert (g["output"], g["tokens"], g["warning"]) == (w["output"], w["tokens"], w["warning"])
        assert abs(g["score"] - w["score"]) <= TOLERANCE if w["output"] else g["score"] == w["score"]
        assert set(g["copied"]) <= set(w["copied"])
    assert any(g["warning"] for g in got)  # the all-unseen source is warned about on both sides


@pytest.fixture
def logged_export(row_export, tmp_path, monkeypatch):
    """The backbone row's export logged as MLflow's pyfunc model (what ``copyseq export --model URI --log``
    logs) in a SQLite store under ``tmp_path``: its model URI."""
    import mlflow

    from pipeline.serving.onnx_pyfunc import log_onnx_model

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    try:
        mlflow.set_experiment("toy")
        with mlflow.start_run() as run:
            pass
        yield log_onnx_model(run.info.run_id, row_export[2], hf_sources(1))
    finally:
        mlflow.set_tracking_uri(previous)


def test_a_logged_backbone_export_loads_and_answers_where_torch_cannot_be_imported(row_export, logged_export, tmp_path):
    """The logged export pins the tokenizer's packages and carries the code the tokenizer reads, and
    ``mlflow.pyfunc.load_model`` of it, in a process where ``import torch`` fails, answers as
    OnnxPredictor does on the export directory."""
    import mlflow

    from pipeline.serving.onnx_predictor import OnnxPredictor
    from tests.pipeline.serving.test_onnx_export import run_without_torch

    out, uri = row_export[2], logged_export
    texts = [*hf_sources(4), "", "WZUW ZW"]
    requirements = Path(mlflow.pyfunc.get_model_dependencies(uri)).read_text(encoding="utf-8").split()
    names = {line.split("==")[0] for line in requirements}
    assert {"onnxruntime", "transformers", "tokenizers"} <= names and "torch" not in names
    local = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=str(tmp_path / "logged")))
    assert (local / "code" / "models" / "backbone_ids.py").is_file()
    code = (
        "import json, sys, mlflow, pandas\n"
        f"model = mlflow.pyfunc.load_model({uri!r})\n"
        f"print(json.dumps(model.predict(pandas.DataFrame({{'text': {texts!r}}}))[['output', 'warning']]"
        ".to_dict('records')))\n"
        "assert 'torch' not in sys.modules\n"
    )
    proc = run_without_torch(tmp_path, ["-c", code])
    assert proc.returncode == 0, proc.stderr[-3000:]
    want = [{"output": r["output"], "warning": r["warning"]} for r in OnnxPredictor(out, threads=1).predict(texts)]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == want
    assert any(w["output"] for w in want) and any(w["warning"] for w in want)  # not vacuous


@pytest.mark.slow
def test_mlflow_models_serve_answers_with_a_logged_backbone_export(row_export, logged_export, tmp_path):
    """`mlflow models serve -m URI` of the logged export on 127.0.0.1: the predictor's rows over HTTP
    (outputs, copied pieces, pieces, warnings), and a source over the limits refused with 400."""
    from pipeline.serving.onnx_predictor import OnnxPredictor
    from tests.helpers import Server, stop_server

    texts = [*hf_sources(4), "", "WZUW ZW"]
    served = Server.start(logged_export, tmp_path)
    try:
        status, answer = served.invoke(texts, {"beam_size": 2})
        assert status == 200, answer
        want = OnnxPredictor(row_export[2], threads=1).predict(texts, beam_size=2)
        assert answer["predictions"] == [
            {"output": w["output"], "copied": list(w["copied"]), "tokens": list(w["tokens"]), "warning": w["warning"]}
            for w in want
        ]
        assert any(w["copied"] for w in want) and any(w["warning"] for w in want)  # not vacuous
        status, answer = served.invoke(texts[:1], {"beam_size": 0})
        assert status == 400 and "beam_size" in answer["message"], answer
    finally:
        stop_server(served.proc)
