"""ONNX export of Read-Again + copy (Zeng et al. 2016): the GRU read-again (eq. 4-6, an ONNX Scan)
and the LSTM one (eq. 8), one sentence and several (opt1 eq. 9, opt2 eq. 10-11), the small decoder
vocabulary (eq. 15's copied-word input). For each: the encoder's state and the step's
log-probabilities equal PyTorch's within 1e-5 (the GRU read-again's memory within 2e-5: its
recurrence of eq. 6 sums in another order in onnxruntime, 1.1e-5 seen at one entry), and greedy and
beam 4 give PyTorch's n-best lists (scores within 1e-4). A multi-sentence model whose sentence ends
are not source words is refused in one line. Tiny models (emb 16, hidden 24) trained 20 steps on the
toy copy task; the project and checks of test_onnx_export.py.

Two exports per module (about 20 s each on two busy cores): the one-sentence rows run by default,
the multi-sentence ones are marked slow, and so is the export after WEAN's in one process (torch's
cached LSTM decomposition).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch

from models.specials import BOS
from pipeline.decoding.search import beam_search, greedy
from pipeline.serving import onnx_search
from pipeline.serving.export import main as export_main
from pipeline.serving.onnx_model import OnnxModel
from tests.pipeline.serving.test_onnx_export import (
    TASK,
    assert_same_greedy,
    assert_same_nbest,
    both_batches,
    export_rows,
    sources,
    torch_model,
    write_project,
)

ENDS = ["s1", "s3"]  # sentence ends of the multi-sentence rows: words of the toy vocabulary
SINGLE = {
    "ra_lstm": ("read_again", {}, {}),  # the defaults: LSTM read-again, one sentence, LSTM decoder
    "ra_gru_shortlist": ("read_again", {}, {"cell": "gru", "decoder_vocab": 40}),  # a, b, s36.. only copied
}
SENTENCES = {
    "ra_gru_opt1": ("read_again", {}, {"cell": "gru", "sentences": "opt1", "sentence_end": ENDS, "decoder": "gru"}),
    "ra_lstm_opt2": ("read_again", {}, {"sentences": "opt2", "sentence_end": ENDS, "max_sentences": 3}),
}
LOG_PROB_TOLERANCE = 1e-5
STATE_TOLERANCE = {"memory": 2e-5}  # the GRU read-again's recurrence (module docstring); other keys 1e-5


def read_again_sources() -> list[list[str]]:
    """Toy sources with 1, 2, 3 and 4 sentences (ended by s1 or s3; past ``max_sentences`` read as
    the last one), an empty one after a final end, OOVs and repeats."""
    out = sources(16, seed=5)
    out[2] = ["a", "s1", "u3", "b"]
    out[3] = ["a", "s5", "s3", "u3", "s1", "s7", "s3", "b", "u3"]
    out[4] = ["s1", "s3", "s1", "a"]  # sentences of one word
    out[5] = ["a", "u4", "s2", "s3"]  # ends with an end: nothing after it
    return out


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    root = write_project(tmp_path_factory.mktemp("onnx_read_again"), SINGLE, steps=20)
    return root, export_rows(root, SINGLE)


@pytest.fixture(scope="module")
def sentences(tmp_path_factory):
    root = write_project(tmp_path_factory.mktemp("onnx_read_again_sentences"), SENTENCES, steps=20)
    return root, export_rows(root, SENTENCES)


ALL = [*SINGLE, *(pytest.param(row, marks=pytest.mark.slow) for row in SENTENCES)]


def exported(request, row: str) -> tuple:
    """(PyTorch model, OnnxModel) of ``row``, from the module's project that holds it."""
    root, exports = request.getfixturevalue("single" if row in SINGLE else "sentences")
    return torch_model(root, row), OnnxModel(exports[row], threads=1)


@pytest.mark.parametrize("row", ALL)
def test_encoder_state_and_step_log_probs_equal_pytorch(request, row) -> None:
    model, onnx_model = exported(request, row)
    batch, inputs, n_ext = both_batches(read_again_sources())
    with torch.no_grad():
        state = model.encode(batch)
        onnx_state = onnx_model.encode(inputs)
        assert set(onnx_state) == {k for k, v in state.items() if torch.is_tensor(v)}
        for key, value in onnx_state.items():
            tolerance = STATE_TOLERANCE.get(key, 1e-5)
            assert np.allclose(value, state[key].numpy(), atol=tolerance, rtol=0), key
        prev = torch.full((len(batch.src),), BOS, dtype=torch.long)
        for _ in range(6):
            log_probs, state = model.step(state, prev)
            onnx_log_probs, updates = onnx_model.step(onnx_state, prev.numpy(), n_ext)
            onnx_state.update(updates)
            want = log_probs.numpy()
            live = want > -1e8
            assert np.allclose(np.exp(onnx_log_probs).sum(-1), 1.0, atol=1e-5)
            assert np.allclose(onnx_log_probs[live], want[live], atol=LOG_PROB_TOLERANCE, rtol=0)
            prev = log_probs.argmax(-1)


@pytest.mark.parametrize("row", ALL)
def test_greedy_and_beam_nbest_equal_pytorch(request, row) -> None:
    model, onnx_model = exported(request, row)
    batch, inputs, n_ext = both_batches(read_again_sources())
    assert_same_nbest(beam_search(model, batch, 4, 12), onnx_search.beam_search(onnx_model, inputs, n_ext, 4, 12))
    want, got = greedy(model, batch, 12), onnx_search.greedy(onnx_model, inputs, n_ext, 12)
    assert_same_greedy(want, got)


def test_sentence_ends_outside_the_source_vocabulary_are_refused_in_one_line(tmp_path, capsys) -> None:
    options = {"sentences": "opt1", "sentence_end": [".", "s1"]}
    root = write_project(tmp_path, {"ra_dot": ("read_again", {}, options)}, steps=0)
    args = [str(root / "data/checkpoints" / TASK / "ra_dot"), "--out", str(tmp_path / "out")]
    assert export_main([*args, "--params", str(root / "params.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("copyseq export: error:")
    assert "model.read_again.sentences opt1" in err and "['.']" in err and "supported: CopyNet" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_an_lstm_read_again_exported_after_wean_in_one_process_keeps_any_source_length(tmp_path) -> None:
    """WEAN's step graph runs an LSTM through its default decomposition, which torch caches for the op;
    the Read-Again export after it, in the same process, must still trace its LSTM reads with a symbolic
    source length (torch.onnx's while-loop decomposition): it passes the export's check on other
    lengths, and its encoder's inputs keep the length as a named axis."""
    rows = {"wean": ("wean", {}, {}), "ra_lstm": ("read_again", {}, {})}
    root = write_project(tmp_path, rows, steps=0)
    exports = {}
    for row in rows:  # in this order, one after the other: export_rows asserts each command's exit 0
        exports.update(export_rows(root, {row: rows[row]}))
    encoder = onnx.load(str(exports["ra_lstm"] / "encoder.onnx"), load_external_data=False)
    src_axes = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in encoder.graph.input}
    assert src_axes["src"] == ["batch", "src"] and src_axes["src_ext"] == ["batch", "src"], src_axes
