"""ONNX export of the other mechanisms the export supports: Pointer Softmax (shortlist, switch,
location softmax), WEAN and Luong (the stacked-LSTM decoder: its (h, c) in the state), RNNSearch,
Enc-Dec (a fixed code, no attention) and CopyNet over the Transformer encoder. Each gives PyTorch's
n-best lists with beam 10 and greedy; the project and checks of test_onnx_export.py. And a model with
a features column, on either decoder, answers as its PyTorch predictor.

Eight exports (about 10 s each): marked slow."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.decoding.search import beam_search, greedy
from pipeline.serving import onnx_search
from pipeline.serving.onnx_model import OnnxModel
from tests.pipeline.serving.test_onnx_export import (
    TOLERANCE,
    assert_same_greedy,
    assert_same_nbest,
    both_batches,
    export_rows,
    sources,
    torch_model,
    write_project,
)

pytestmark = pytest.mark.slow

ROWS = {
    "pointer_softmax": ("pointer_softmax", {}, {"shortlist": 40}),  # the unseen fillers and some seen ones: pointed at
    "wean": ("wean", {}, {}),
    "luong": ("luong", {}, {}),
    "rnnsearch": ("rnnsearch", {}, {}),
    "encdec": ("encdec", {}, {}),
    "copynet_tf_encoder": ("copynet", {"encoder": "transformer", "transformer_heads": 2}, {}),
}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = write_project(tmp_path_factory.mktemp("onnx_mechanisms"), ROWS)
    return root, export_rows(root, ROWS)


@pytest.mark.parametrize("row", ROWS)
def test_nbest_and_greedy_equal_pytorch(project, row) -> None:
    root, exports = project
    model, onnx_model = torch_model(root, row), OnnxModel(exports[row], threads=1)
    batch, inputs, n_ext = both_batches(sources())
    assert_same_nbest(beam_search(model, batch, 10, 12), onnx_search.beam_search(onnx_model, inputs, n_ext, 10, 12))
    want, got = greedy(model, batch, 12), onnx_search.greedy(onnx_model, inputs, n_ext, 12)
    assert_same_greedy(want, got)


def assert_features_answer_as_pytorch(project, ckpt, out) -> None:
    """``ckpt`` (a CopyNet with features on the revcopy task of ``project``) exported to ``out``: the
    export reads the tags (``features`` (B, F), any F) and the predictors agree on the first 40 test rows."""
    from dataclasses import asdict

    from pipeline.io.shards import read_split
    from pipeline.serving.export import main as export_main
    from pipeline.serving.onnx_predictor import OnnxPredictor
    from pipeline.serving.predict import checkpoint_settings
    from pipeline.serving.predictor import ServingConfig
    from pipeline.serving.pyfunc import local_model
    from tests.helpers import FEATURES_TASK

    params = project / "params.yaml"
    assert export_main([str(ckpt), "--out", str(out), "--params", str(params)]) == 0
    vocab, config, subword = checkpoint_settings(ckpt, FEATURES_TASK, None, params)
    want = local_model(ckpt, vocab, ServingConfig.from_dict(asdict(config)), subword).python_model.predictor
    got = OnnxPredictor(out, threads=1)
    table = read_split(project / "data/shards" / FEATURES_TASK / "test")
    texts = ["".join(s) for s in table.column("src").to_pylist()][:40]
    tags = table.column("features").to_pylist()[:40]
    assert {t[0] for t in tags} == {"COPY", "REV"}
    torch_rows, onnx_rows = want.predict(texts, features=tags), got.predict(texts, features=tags)
    assert [r["tokens"] for r in onnx_rows] == [r["tokens"] for r in torch_rows]
    assert np.allclose([r["score"] for r in onnx_rows], [r["score"] for r in torch_rows], atol=TOLERANCE + 1e-4)
    flipped = got.predict(texts[:4], features=[["REV" if t == ["COPY"] else "COPY"] for t in tags[:4]])
    assert [r["tokens"] for r in flipped] != [r["tokens"] for r in onnx_rows[:4]]  # the tags are read


def test_a_model_with_features_answers_as_pytorch(features_project, tmp_path) -> None:
    """A task with a features column (tests/conftest.py's revcopy: a tag says reverse or copy)."""
    from tests.helpers import FEATURES_TASK

    ckpt = features_project / "data/checkpoints" / FEATURES_TASK / "copynet"
    assert_features_answer_as_pytorch(features_project, ckpt, tmp_path / "out")


def test_features_on_the_transformer_decoder_answer_as_pytorch(features_project, tmp_path) -> None:
    """The same task on the Transformer decoder: the features enter every step's input there too
    (e(y_{t-1}) + f, models/seq2seq.py), through the exported step graph and its growing caches."""
    from tests.helpers import FEATURES_TASK, train_features_copynet

    ckpt = tmp_path / FEATURES_TASK / "copynet"  # a model.pt of CopyNet (its options: the decoder)
    train_features_copynet(features_project, ckpt, epochs=3, decoder="transformer", decoder_heads=2, decoder_layers=2)
    assert_features_answer_as_pytorch(features_project, ckpt, tmp_path / "out")
