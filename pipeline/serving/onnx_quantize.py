"""``copyseq export --int8``: the export's graphs with 8-bit weights (onnxruntime's dynamic quantization).

Each constant weight of a matrix product (``MatMul``: the output layer, attention and copy scores, a
backbone's projections) and each embedding table (``Gather``) is stored as int8 with one float scale
per output column (per channel); activations are quantized on the fly, row by row, at run time
(``DynamicQuantizeLinear`` + ``MatMulInteger``). Those weights take a quarter of their float32 bytes.
What stays float32: ``Gemm`` (a linear layer with its bias on 2-D inputs), the recurrent layers that
run as ONNX ``GRU``/``LSTM`` nodes (the encoders, WEAN's LSTM decoder), the biases and norms. The result is an
approximation: the export records how far it moved from PyTorch (the manifest's ``quantization``), and
docs/export.md gives what it changed on a task's validation set.

onnxruntime's ``quantize_dynamic`` writes each graph with its own external-data file; the graphs are
then written again through :class:`pipeline.serving.onnx_weights.SharedWeights`, so the export keeps one
``weights.bin`` with each tensor once.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import onnx
from onnxruntime.quantization import QuantType, quantize_dynamic

from pipeline.serving.onnx_weights import SharedWeights

OPS = ("MatMul", "Gather")  # the op types whose constant weights become int8
PER_CHANNEL = True  # one scale per output column: the finer choice (one per tensor changed as many copy_rules outputs)


def quantize_graphs(export_dir: Path, graph_files: list[str]) -> None:
    """Rewrite ``export_dir``'s graphs (float32, weights in ``weights.bin``) with int8 weights, in place."""
    level = logging.getLogger().level
    logging.getLogger().setLevel(logging.ERROR)  # its advice to run shape inference first is for static shapes
    try:
        with tempfile.TemporaryDirectory(prefix=".int8-", dir=export_dir) as tmp:
            for name in graph_files:
                quantize_dynamic(
                    export_dir / name,
                    Path(tmp) / name,
                    op_types_to_quantize=list(OPS),
                    per_channel=PER_CHANNEL,
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
    }
