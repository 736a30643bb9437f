"""The shared weights file of an export (pipeline/serving/onnx_weights.py) on two hand-made graphs:
what is stored once, what stays inline, and that onnxruntime and onnx.load read the graphs back."""

from __future__ import annotations

import ctypes

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from pipeline.serving.onnx_model import shared_initializers
from pipeline.serving.onnx_weights import ALIGN, INLINE_BYTES, WEIGHTS_FILE, SharedWeights, shared_segments

RNG = np.random.default_rng(0)
SHARED = RNG.standard_normal((64, 32)).astype(np.float32)  # 8 KB: in both graphs
OWN = RNG.standard_normal((32, 16)).astype(np.float32)  # 2 KB: the second graph's alone
BIAS = RNG.standard_normal(16).astype(np.float32)  # 64 bytes: stays inline


def _graph(initializers: list[TensorProto], nodes: list, out_dim: int) -> onnx.ModelProto:
    """x (B, 64) -> y (B, out_dim) through ``nodes``."""
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", out_dim])],
        initializer=initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _first() -> onnx.ModelProto:
    return _graph([numpy_helper.from_array(SHARED, "emb")], [helper.make_node("MatMul", ["x", "emb"], ["y"])], 32)


def _second() -> onnx.ModelProto:
    # the shared matrix under another name, stored as float_data rather than raw bytes
    shared = helper.make_tensor("table", TensorProto.FLOAT, SHARED.shape, SHARED.ravel().tolist())
    nodes = [
        helper.make_node("MatMul", ["x", "table"], ["h"]),
        helper.make_node("MatMul", ["h", "own"], ["p"]),
        helper.make_node("Add", ["p", "bias"], ["y"]),
    ]
    inits = [shared, numpy_helper.from_array(OWN, "own"), numpy_helper.from_array(BIAS, "bias")]
    return _graph(inits, nodes, 16)


def _locations(path) -> dict[str, tuple[int, int] | None]:
    """Initializer name -> (offset, length) in the weights file, None where stored inline."""
    proto = onnx.load(str(path), load_external_data=False)
    out = {}
    for init in proto.graph.initializer:
        info = {e.key: e.value for e in init.external_data}
        external = init.data_location == TensorProto.EXTERNAL
        assert not external or info["location"] == WEIGHTS_FILE
        out[init.name] = (int(info["offset"]), int(info["length"])) if external else None
    return out


def test_a_tensor_in_both_graphs_is_written_once_and_both_read_it_back(tmp_path):
    weights = SharedWeights(tmp_path)
    weights.save(_first(), "first.onnx")
    weights.save(_second(), "second.onnx")
    first, second = _locations(tmp_path / "first.onnx"), _locations(tmp_path / "second.onnx")
    assert first["emb"] == second["table"] == (0, SHARED.nbytes)  # one segment, both graphs point at it
    assert second["own"] == (ALIGN * -(-SHARED.nbytes // ALIGN), OWN.nbytes)  # next page boundary
    assert BIAS.nbytes < INLINE_BYTES and second["bias"] is None
    assert (tmp_path / WEIGHTS_FILE).stat().st_size == second["own"][0] + OWN.nbytes
    # the graphs are small; their weights come back exactly, through onnx.load and onnxruntime
    assert (tmp_path / "second.onnx").stat().st_size < 1024
    loaded = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(tmp_path / "second.onnx")).graph.initializer}
    assert np.array_equal(loaded["table"], SHARED) and np.array_equal(loaded["own"], OWN)
    x = RNG.standard_normal((3, 64)).astype(np.float32)
    for name, want in (("first.onnx", x @ SHARED), ("second.onnx", x @ SHARED @ OWN + BIAS)):
        (got,) = ort.InferenceSession(str(tmp_path / name), providers=["CPUExecutionProvider"]).run(None, {"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_same_bytes_of_another_shape_or_type_are_not_shared(tmp_path):
    """A tensor is reused only with its type and shape: the same bytes as (32, 64) are another tensor."""
    weights = SharedWeights(tmp_path)
    weights.save(_first(), "first.onnx")
    other = _graph(
        [numpy_helper.from_array(SHARED.reshape(32, 64), "emb")],
        [helper.make_node("MatMul", ["x", "emb"], ["y"])],
        64,
    )
    other.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 32
    weights.save(other, "other.onnx")
    assert _locations(tmp_path / "first.onnx")["emb"] == (0, SHARED.nbytes)
    assert _locations(tmp_path / "other.onnx")["emb"] == (ALIGN * -(-SHARED.nbytes // ALIGN), SHARED.nbytes)


def test_both_sessions_use_one_buffer_of_a_shared_weight(tmp_path):
    """The manifest's shared segments give every graph reading one the same value, read once; the
    sessions answer with it, and use its memory (a change to the buffer shows in a lookup's output)."""
    weights = SharedWeights(tmp_path)
    lookup = _graph([numpy_helper.from_array(SHARED, "emb")], [helper.make_node("Gather", ["emb", "ids"], ["y"])], 32)
    lookup.graph.input[0].CopyFrom(helper.make_tensor_value_info("ids", TensorProto.INT64, ["B"]))
    weights.save(lookup, "first.onnx")
    weights.save(_second(), "second.onnx")
    segments = shared_segments(tmp_path, ["first.onnx", "second.onnx"])
    assert segments == [
        {
            "offset": 0,
            "length": SHARED.nbytes,
            "dtype": "float32",
            "shape": [64, 32],
            "names": {"first.onnx": "emb", "second.onnx": "table"},
        }
    ]
    values = shared_initializers(tmp_path, {"weights": {"file": WEIGHTS_FILE, "shared": segments}})
    ((first_name, first),), ((second_name, second),) = values["first.onnx"], values["second.onnx"]
    assert (first_name, second_name) == ("emb", "table") and first is second
    assert np.array_equal(first.numpy(), SHARED)
    sessions = {}
    for graph, pairs in values.items():
        options = ort.SessionOptions()
        for name, value in pairs:
            options.add_initializer(name, value)
        sessions[graph] = ort.InferenceSession(str(tmp_path / graph), options, providers=["CPUExecutionProvider"])
    x = RNG.standard_normal((3, 64)).astype(np.float32)
    (got,) = sessions["second.onnx"].run(None, {"x": x})
    np.testing.assert_allclose(got, x @ SHARED @ OWN + BIAS, rtol=1e-5, atol=1e-5)
    ids = np.array([5, 0], dtype=np.int64)
    (rows,) = sessions["first.onnx"].run(None, {"ids": ids})
    assert np.array_equal(rows, SHARED[ids])
    row = SHARED.shape[1] * SHARED.itemsize
    ctypes.memset(first.data_ptr() + 5 * row, 0, row)  # row 5 of the one buffer, zeroed in place
    (rows,) = sessions["first.onnx"].run(None, {"ids": ids})
    assert not rows[0].any() and np.array_equal(rows[1], SHARED[0])  # the session read that memory
