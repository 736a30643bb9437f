"""``export --int8`` on the models whose recurrent layers run as ONNX ``LSTM`` nodes (Read-Again's reads,
WEAN's decoder): the weights the exporter hands those nodes through ``Slice``/``Concat`` are stored as
constants (:func:`pipeline.serving.onnx_quantize.fold_lstm_weights`, checked on a hand-made graph against
onnxruntime), and then as int8 (``DynamicQuantizeLSTM``); the int8 exports answer as their float twins on
the toy sources. Tiny models of test_onnx_export.py, trained 20 steps."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pipeline.serving.onnx_predictor import OnnxPredictor
from pipeline.serving.onnx_quantize import fold_lstm_weights
from tests.pipeline.serving.test_onnx_export import export_rows, sources, write_project

ROWS = {"ra_lstm": ("read_again", {}, {}), "wean": ("wean", {}, {})}
HIDDEN, FEATURES = 4, 3


def lstm_graph() -> onnx.ModelProto:
    """X (T, B, 3) through an LSTM whose W and R are the stored weights with their four gate blocks
    reordered by Slice and Concat (as the exporter writes it), and whose B is stored."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4 * HIDDEN, FEATURES)).astype(np.float32)
    r = rng.standard_normal((4 * HIDDEN, HIDDEN)).astype(np.float32)
    b = rng.standard_normal(8 * HIDDEN).astype(np.float32)
    stored = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(r, "r"), numpy_helper.from_array(b, "b")]
    stored += [numpy_helper.from_array(np.array([v], dtype=np.int64), f"at{v}") for v in range(0, 5 * HIDDEN, HIDDEN)]
    stored.append(numpy_helper.from_array(np.array([0], dtype=np.int64), "axis0"))
    nodes = []
    for source in ("w", "r"):
        blocks = [f"{source}_{k}" for k in range(4)]
        for k, block in enumerate(blocks):
            nodes.append(
                helper.make_node("Slice", [source, f"at{k * HIDDEN}", f"at{(k + 1) * HIDDEN}", "axis0"], [block])
            )
        order = [blocks[0], blocks[3], blocks[1], blocks[2]]  # i, f, g, o -> i, o, f, c
        nodes.append(helper.make_node("Concat", order, [f"{source}_cat"], axis=0))
        nodes.append(helper.make_node("Unsqueeze", [f"{source}_cat", "axis0"], [f"{source}_in"]))
    nodes.append(helper.make_node("Unsqueeze", ["b", "axis0"], ["b_in"]))
    nodes.append(helper.make_node("LSTM", ["x", "w_in", "r_in", "b_in"], ["y"], hidden_size=HIDDEN))
    graph = helper.make_graph(
        nodes,
        "lstm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", "B", FEATURES])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        stored,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def test_fold_stores_the_lstm_weights_and_computes_the_same() -> None:
    model = lstm_graph()
    x = np.random.default_rng(1).standard_normal((5, 2, FEATURES)).astype(np.float32)
    want = run(model, x)
    assert fold_lstm_weights(model) == 3  # W, R and B
    stored = {t.name for t in model.graph.initializer}
    (lstm,) = [n for n in model.graph.node if n.op_type == "LSTM"]
    assert all(name in stored for name in lstm.input[1:4])
    assert [n.op_type for n in model.graph.node] == ["LSTM"]  # the Slice/Concat/Unsqueeze nodes are gone
    assert stored == set(lstm.input[1:4])  # and so are the weights only they read
    np.testing.assert_array_equal(run(model, x), want)


def test_fold_leaves_weights_computed_from_inputs_alone() -> None:
    """An LSTM whose W is a graph input is not touched."""
    model = lstm_graph()
    model.graph.input.append(helper.make_tensor_value_info("w_in2", TensorProto.FLOAT, [1, 4 * HIDDEN, FEATURES]))
    (lstm,) = [n for n in model.graph.node if n.op_type == "LSTM"]
    lstm.input[1] = "w_in2"
    assert fold_lstm_weights(model) == 2  # R and B only
    assert lstm.input[1] == "w_in2"


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> tuple[dict, dict]:
    root = write_project(tmp_path_factory.mktemp("onnx_int8_lstm"), ROWS, steps=20)
    return export_rows(root, ROWS), export_rows(root, ROWS, "exports_int8", ("--int8",))


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS)
def test_int8_stores_the_lstm_weights_in_8_bits_and_answers_as_its_float_twin(exports, row) -> None:
    floats, int8s = exports
    lstms = 0
    for graph in ("encoder.onnx", "step.onnx"):
        before = onnx.load(str(floats[row] / graph))
        after = onnx.load(str(int8s[row] / graph))
        n_lstm = sum(n.op_type == "LSTM" for n in before.graph.node)
        assert not any(n.op_type == "LSTM" for n in after.graph.node), graph  # every one quantized
        quantized = [n for n in after.graph.node if n.op_type == "DynamicQuantizeLSTM"]
        assert len(quantized) == n_lstm, graph
        stored = {t.name: t for t in after.graph.initializer}
        for node in quantized:
            for weight in (stored[node.input[1]], stored[node.input[2]]):  # W, R
                assert weight.data_type == TensorProto.INT8
                values = numpy_helper.to_array(weight)
                assert -64 <= values.min() and values.max() <= 64  # |w| <= 64 (onnx_quantize.REDUCE_RANGE)
        lstms += n_lstm
    assert lstms >= 1  # Read-Again's two reads, WEAN's decoder
    float_bytes = (floats[row] / "weights.bin").stat().st_size
    assert (int8s[row] / "weights.bin").stat().st_size < 0.6 * float_bytes
    texts = [" ".join(s) for s in sources(48, seed=7)]
    want = OnnxPredictor(floats[row], threads=1).predict(texts)
    got = OnnxPredictor(int8s[row], threads=1).predict(texts)
    same = sum(g["output"] == w["output"] for g, w in zip(got, want, strict=True))
    assert same >= 0.9 * len(texts), same
