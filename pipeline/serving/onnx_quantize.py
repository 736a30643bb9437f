"""``copyseq export --int8``: the export's graphs with 8-bit weights (onnxruntime's dynamic quantization).

Each constant weight of a matrix product (``MatMul``: the output layer, attention and copy scores, a
backbone's projections), each embedding table (``Gather``) and the input and recurrent weights of each
``LSTM`` node (Read-Again's reads, WEAN's decoder) is stored as int8 within 7 bits (``REDUCE_RANGE``: no
overflow on CPUs without VNNI) with one float scale per output column (per channel); activations are
quantized on the fly, row by row, at run time (``DynamicQuantizeLinear`` + ``MatMulInteger``,
``DynamicQuantizeLSTM``). Those weights take a quarter of their float32 bytes. What stays float32:
``Gemm`` (a linear layer with its bias on 2-D inputs), the ``GRU`` nodes (the BiGRU encoder:
onnxruntime has no integer GRU), the biases and norms. The result is an approximation: the export
records how far it moved from PyTorch (the manifest's ``quantization``), and docs/export.md gives what
it changed on a task's validation set.

The exporter hands an ``LSTM`` node its weights through ``Slice``/``Concat`` nodes (PyTorch's gate order
i, f, g, o reordered into ONNX's i, o, f, c at run time), and the quantizer only reads weights that are
stored constants, so those inputs are computed once here and stored (:func:`fold_lstm_weights`).

onnxruntime's ``quantize_dynamic`` writes each graph with its own external-data file; the graphs are
then written again through :class:`pipeline.serving.onnx_weights.SharedWeights`, so the export keeps one
``weights.bin`` with each tensor once.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnxruntime.quantization import QuantType, quantize_dynamic

from pipeline.serving.onnx_weights import SharedWeights

OPS = ("MatMul", "Gather", "LSTM")  # the op types whose constant weights become int8
PER_CHANNEL = True  # one scale per output column: the finer choice (one per tensor changed as many copy_rules outputs)
# Weights within 7 bits (|w| <= 64). On x86 CPUs without VNNI (AVX2, AVX-512F) onnxruntime adds each
# pair of products of a uint8 activation and an int8 weight in int16, which full 8-bit weights overflow
# (2 x 255 x 127) and 7-bit ones do not (2 x 255 x 64 = 32,640). Measured on an AVX2-only CPU
# (benchmarks/README.md, int8 section): 8 bits changed up to 3 in 10 best outputs of copy_rules and lost
# correct ones; 7 bits lost none.
REDUCE_RANGE = True


LSTM_WEIGHTS = range(1, 4)  # an LSTM node's inputs W, R, B (after X; before the optional rest)


def _constant_nodes(name: str, producers: dict[str, onnx.NodeProto], stored: set[str]) -> list | None:
    """The nodes that compute ``name`` from stored weights alone, in run order; None when any input of
    them is a graph input (not a constant)."""
    order, seen = [], set()

    def visit(value: str) -> bool:
        if not value or value in stored or value in seen:
            return True
        node = producers.get(value)
        if node is None:
            return False  # a graph input
        if not all(visit(i) for i in node.input):
            return False
        seen.update(node.output)
        order.append(node)
        return True

    return order if visit(name) else None


def _drop_unused(graph: onnx.GraphProto) -> None:
    """Remove the nodes whose outputs nothing reads (repeatedly), then the weights nothing reads."""
    while True:
        read = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
        dead = [n for n in graph.node if not any(o in read for o in n.output)]
        if not dead:
            break
        for node in dead:
            graph.node.remove(node)
    unread = [t for t in graph.initializer if t.name not in read]
    for tensor in unread:
        graph.initializer.remove(tensor)


def fold_lstm_weights(proto: onnx.ModelProto) -> int:
    """Store each ``LSTM`` node's W, R and B as constants where they are computed from stored weights
    alone; the nodes that only computed them are removed. Returns how many inputs were stored.

    Written by hand: onnxscript's optimizer folds constants over the whole graph by size, and with
    limits large enough for these weights it also stored a larger copy of another weight (WEAN's step
    graph grew by 257 KB)."""
    graph = proto.graph
    stored = {t.name: t for t in graph.initializer}
    producers = {o: n for n in graph.node for o in n.output}
    folded = 0
    for node in [n for n in graph.node if n.op_type == "LSTM"]:
        for index in (i for i in LSTM_WEIGHTS if i < len(node.input)):
            name = node.input[index]
            nodes = None if not name or name in stored else _constant_nodes(name, producers, set(stored))
            if not nodes:
                continue
            needed = {i for n in nodes for i in n.input if i in stored}
            piece = helper.make_model(
                helper.make_graph(
                    nodes,
                    "fold",
                    [],
                    [helper.make_tensor_value_info(name, onnx.TensorProto.UNDEFINED, None)],
                    [stored[i] for i in sorted(needed)],
                ),
                opset_imports=proto.opset_import,
            )
            constant = numpy_helper.from_array(ReferenceEvaluator(piece).run(None, {})[0], f"{name}.folded")
            graph.initializer.append(constant)
            stored[constant.name] = constant
            node.input[index] = constant.name  # the nodes that computed it are now unread: dropped below
            folded += 1
    _drop_unused(graph)
    return folded


def quantize_graphs(export_dir: Path, graph_files: list[str]) -> None:
    """Rewrite ``export_dir``'s graphs (float32, weights in ``weights.bin``) with int8 weights, in place."""
    level = logging.getLogger().level
    logging.getLogger().setLevel(logging.ERROR)  # its advice to run shape inference first is for static shapes
    try:
        with tempfile.TemporaryDirectory(prefix=".int8-", dir=export_dir) as tmp:
            for name in graph_files:
                source = export_dir / name
                proto = onnx.load(str(source))  # with its weights
                if fold_lstm_weights(proto):
                    source = Path(tmp) / f"folded-{name}"
                    onnx.save(proto, str(source), save_as_external_data=True, location=f"{source.name}.data")
                quantize_dynamic(
                    source,
                    Path(tmp) / name,
                    op_types_to_quantize=list(OPS),
                    per_channel=PER_CHANNEL,
                    reduce_range=REDUCE_RANGE,
                    weight_type=QuantType.QInt8,
                    use_external_data_format=True,
                )
            protos = [onnx.load(str(Path(tmp) / name)) for name in graph_files]  # with their weights, in memory
    finally:
        logging.getLogger().setLevel(level)
    weights = SharedWeights(export_dir)  # a new weights.bin: the float one is no longer read
    for proto, name in zip(protos, graph_files):
        weights.save(proto, name)


def describe() -> dict:
    """The manifest's ``quantization`` entry, before the check's figures are added."""
    return {
        "weights": "int8",
        "method": "onnxruntime.quantization.quantize_dynamic",
        "ops": list(OPS),
        "per_channel": PER_CHANNEL,
        "reduce_range": REDUCE_RANGE,
    }
