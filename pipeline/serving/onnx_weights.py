"""The export's graphs with their weights in one shared file, ``weights.bin``, each tensor stored once.

The encoder and step graphs both hold some of the same weights: a backbone's shared embedding (the
encoder's input embedding, the decoder's input embedding and tied output layer: 154 MB in BART-base)
and, on any model, whatever the encoder graph computes with decoder parameters (the decoder's initial
state, a Transformer decoder's cross-attention keys and values). Saved inline, each graph carries its
own copy, and a graph over 2 GB cannot be saved at all (protobuf's limit on one message).

Here every initializer of at least ``INLINE_BYTES`` goes to ``weights.bin`` as ONNX external data
(``location``/``offset``/``length``, read by onnxruntime and ``onnx.load`` next to the graph), and a
tensor whose type, shape and bytes equal one already written points at that one. onnx's own
``convert_model_to_external_data`` writes one file per graph and shares nothing across graphs, so
the few lines below do it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import onnx
from onnx import numpy_helper

WEIGHTS_FILE = "weights.bin"
INLINE_BYTES = 1024  # smaller initializers stay in the graph (onnx's own default threshold)
ALIGN = 4096  # each tensor starts on a page boundary (onnxruntime may map the file)


class SharedWeights:
    """Writes the initializers of graphs saved one after the other into ``out_dir/weights.bin``."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.path = out_dir / WEIGHTS_FILE
        self.path.write_bytes(b"")
        self.written: dict[tuple, tuple[int, int]] = {}  # (dtype, dims, sha256) -> (offset, length)

    def save(self, proto: onnx.ModelProto, name: str) -> None:
        """Move ``proto``'s large initializers out to the shared file (those already there are only
        pointed at), write the graph as ``out_dir/name`` and check it with its weights."""
        with self.path.open("r+b") as weights:
            for tensor in proto.graph.initializer:
                data = tensor.raw_data if tensor.HasField("raw_data") else numpy_helper.to_array(tensor).tobytes()
                if len(data) < INLINE_BYTES:
                    continue
                key = (tensor.data_type, tuple(tensor.dims), hashlib.sha256(data).hexdigest())
                if key not in self.written:
                    offset = -(-weights.seek(0, 2) // ALIGN) * ALIGN
                    weights.seek(offset)
                    weights.write(data)
                    self.written[key] = (offset, len(data))
                offset, length = self.written[key]
                for field in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
                    tensor.ClearField(field)
                del tensor.external_data[:]
                for entry_key, value in (("location", WEIGHTS_FILE), ("offset", offset), ("length", length)):
                    entry = tensor.external_data.add()
                    entry.key, entry.value = entry_key, str(value)
                tensor.data_location = onnx.TensorProto.EXTERNAL
        path = self.out_dir / name
        onnx.save(proto, str(path))
        onnx.checker.check_model(str(path))  # by path: the checker reads the external data too


def shared_segments(out_dir: Path, graph_files: list[str]) -> list[dict]:
    """The segments of the weights file that more than one graph reads: offset, length, numpy dtype,
    shape and each graph's name for it (the manifest's ``weights.shared``: what a reader loads once
    and gives every session, :func:`pipeline.serving.onnx_model.shared_initializers`)."""
    users: dict[tuple[int, int], dict] = {}
    for graph in graph_files:
        for tensor in onnx.load(str(out_dir / graph), load_external_data=False).graph.initializer:
            if tensor.data_location != onnx.TensorProto.EXTERNAL:
                continue
            info = {e.key: e.value for e in tensor.external_data}
            segment = users.setdefault(
                (int(info["offset"]), int(info["length"])),
                {
                    "dtype": onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).name,
                    "shape": list(tensor.dims),
                    "names": {},
                },
            )
            segment["names"][graph] = tensor.name
    return [
        {"offset": offset, "length": length, **segment}
        for (offset, length), segment in sorted(users.items())
        if len(segment["names"]) > 1
    ]
