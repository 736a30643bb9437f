"""ONNX export on the Transformer decoder (``model.decoder: transformer``, the default run's
``copynet_transformer`` and ``pointer_generator_transformer`` rows): the key/value caches are state
tensors whose length grows by one each step, and the exported search gives PyTorch's n-best lists
(greedy, beam 1 and 10), records and predictor outputs. The project and checks of
tests/pipeline/serving/test_onnx_export.py, on variants of CopyNet (selective read, stepped through
the cache) and the pointer-generator (coverage over the alignment head)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline.decoding.search import beam_search, greedy
from pipeline.serving import onnx_search
from pipeline.serving.onnx_model import OnnxModel
from pipeline.serving.onnx_predictor import OnnxPredictor
from tests.pipeline.serving.test_onnx_export import (
    EVALUATE,
    PREPARE,
    TASK,
    TOLERANCE,
    assert_same_greedy,
    assert_same_nbest,
    both_batches,
    export_rows,
    sources,
    torch_model,
    write_project,
)

TRANSFORMER = {"decoder": "transformer", "decoder_heads": 2, "decoder_layers": 2}
ROWS = {
    "copynet_transformer": ("copynet", TRANSFORMER, {}),
    "pointer_generator_transformer": ("pointer_generator", TRANSFORMER, {"coverage": True}),
}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = write_project(tmp_path_factory.mktemp("onnx_transformer"), ROWS)
    return root, export_rows(root, ROWS)


@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("beam", [1, 10])
def test_beam_search_nbest_equals_pytorch(project, row, beam) -> None:
    root, exports = project
    batch, inputs, n_ext = both_batches(sources())
    want = beam_search(torch_model(root, row), batch, beam, 12, min_len=2, block_ngram=3)
    got = onnx_search.beam_search(OnnxModel(exports[row], threads=1), inputs, n_ext, beam, 12, min_len=2, block_ngram=3)
    assert_same_nbest(want, got)
    assert len({len(h[0].ids) for h in got}) > 2


@pytest.mark.parametrize("row", ROWS)
def test_greedy_equals_pytorch(project, row) -> None:
    root, exports = project
    batch, inputs, n_ext = both_batches(sources(16, seed=2))
    want = greedy(torch_model(root, row), batch, 12)
    got = onnx_search.greedy(OnnxModel(exports[row], threads=1), inputs, n_ext, 12)
    assert_same_greedy(want, got)


def test_the_cache_grows_by_one_position_a_step(project) -> None:
    """The manifest names the caches' length axis ``cache``; the encoder gives empty caches and each
    step one more position, the coverage the sum of the attention so far (See et al. eq. 10)."""
    _, exports = project
    out = exports["pointer_generator_transformer"]
    manifest = json.loads((out / "manifest.json").read_text())
    inputs = {s["name"]: s["shape"] for s in manifest["graphs"]["step"]["inputs"]}
    assert inputs["state.tf_self_k0"] == ["batch", TRANSFORMER["decoder_heads"], "cache", 12]
    assert "state.tf_mem_k1" in inputs and "tf_mem_k1" in manifest["state"]["static"]
    model = OnnxModel(out, threads=1)
    _, inputs, n_ext = both_batches(sources(3))
    state = model.encode(inputs)
    assert state["tf_self_v1"].shape[2] == 0
    total = np.zeros_like(state["coverage"])
    prev = np.full(3, 2)
    for t in range(1, 4):
        log_probs, updates = model.step(state, prev, n_ext)
        state.update(updates)
        total += updates["attn"]
        assert state["tf_self_k0"].shape[2] == t and np.allclose(state["coverage"], total, atol=1e-6)
        prev = log_probs.argmax(1)


@pytest.mark.parametrize("row", ROWS)
def test_predictor_outputs_equal_pytorch(project, row) -> None:
    from pipeline.serving.predictor import ServingConfig
    from pipeline.serving.pyfunc import local_model

    root, exports = project
    texts = [" ".join(s) for s in sources(16, seed=9)]
    config = ServingConfig.from_params(TASK, row, PREPARE, EVALUATE)
    want = local_model(root / "data/checkpoints" / TASK / row, root / "data/vocab" / TASK, config)
    got = OnnxPredictor(exports[row], threads=1).predict(texts)
    torch_rows = want.python_model.predictor.predict(texts)
    assert [g["tokens"] for g in got] == [w["tokens"] for w in torch_rows]
    assert [g["copied"] for g in got] == [w["copied"] for w in torch_rows]
    assert np.allclose([g["score"] for g in got], [w["score"] for w in torch_rows], atol=TOLERANCE + 1e-4)
