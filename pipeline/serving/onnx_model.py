"""An exported model loaded into onnxruntime: its manifest, the encoder and the decoder step as
numpy in, numpy out (what :mod:`pipeline.serving.onnx_search` drives). No torch.

The export directory (``copyseq export``, :mod:`pipeline.serving.export`) holds ``manifest.json``
(:data:`MANIFEST`), ``encoder.onnx``, ``step.onnx``, their weights ``weights.bin``, the vocabularies and
``serving.json``. A weight both graphs read (``weights.shared`` in the manifest) is loaded once and
given to both sessions (:func:`shared_initializers`). The state the graphs pass is named in the
manifest: ``static`` keys are fixed per source, ``recurrent`` keys are what a step changes (and what
beam search reorders).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort

MANIFEST = "manifest.json"
FORMAT = 1  # the manifest's format: a reader refuses one it does not know
STATE, NEXT, ATTENTION = "state.", "next.", "attn"


def read_manifest(export_dir: str | Path) -> dict:
    """The export directory's manifest; a ValueError naming the file when it is missing or of
    another format."""
    path = Path(export_dir) / MANIFEST
    if not path.is_file():
        raise ValueError(f"{path}: no such file: not an export directory (copyseq export writes one)")
    manifest = json.loads(path.read_text(encoding="utf-8"))
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{path}: manifest format {manifest.get('format')!r}, this code reads format {FORMAT}")
    return manifest


def session_options(threads: int | None) -> ort.SessionOptions:
    """One inference session's settings: ``threads`` intra-op threads (None: onnxruntime's default,
    one per physical core), one inter-op thread (the graphs are sequential)."""
    options = ort.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # No memory pattern: it plans buffers for the shapes of a first run and keeps them, and a search's
    # shapes change every step (hypotheses, extended slots, the Transformer's cache): measured at 64
    # sentences, beam 10, it only added to the peak (CopyNet 50k words: 1,141 -> 757 MB), at no speed.
    options.enable_mem_pattern = False
    options.log_severity_level = 3  # errors only: not onnxruntime's notes on shapes it re-infers
    return options


def shared_initializers(export_dir: Path, manifest: dict) -> dict[str, list[tuple[str, ort.OrtValue]]]:
    """Graph file -> (initializer name, value) of each weight that several graphs read, each read
    once from the weights file into one buffer that every session uses (``add_initializer``: the
    session neither copies it nor reads its own from the file). An export without ``weights.shared``:
    none."""
    weights = manifest.get("weights", {})
    out: dict[str, list[tuple[str, ort.OrtValue]]] = {}
    for segment in weights.get("shared", []):
        dtype = np.dtype(segment["dtype"])
        array = np.fromfile(
            export_dir / weights["file"],
            dtype=dtype,
            count=segment["length"] // dtype.itemsize,
            offset=segment["offset"],
        ).reshape(segment["shape"])
        value = ort.OrtValue.ortvalue_from_numpy(array)  # shares the array's memory
        for graph, name in segment["names"].items():
            out.setdefault(graph, []).append((name, value))
    return out


class OnnxModel:
    """``encode(inputs) -> state`` and ``step(state, prev_ids, n_ext) -> (log_probs, updates)`` of an
    export directory, on onnxruntime's CPU provider."""

    def __init__(self, export_dir: str | Path, threads: int | None = None) -> None:
        self.dir = Path(export_dir)
        self.threads = threads  # each session's intra-op threads (None: onnxruntime's default)
        self.manifest = read_manifest(self.dir)
        graphs = self.manifest["graphs"]
        # the values stay referenced here: onnxruntime uses their memory for as long as the sessions live
        self.shared = shared_initializers(self.dir, self.manifest)
        self.encoder = self._session(graphs["encoder"]["file"], threads)
        self.decoder = self._session(graphs["step"]["file"], threads)
        self.keys = tuple(self.manifest["state"]["keys"])
        self.recurrent = tuple(self.manifest["state"]["recurrent"])
        self.static_keys = frozenset(k for k in self.keys if k not in self.recurrent)
        self.encoder_inputs = tuple(i.name for i in self.encoder.get_inputs())
        self.step_outputs = tuple(o.name for o in self.decoder.get_outputs())
        self.tgt_vocab = int(self.manifest["vocab"]["tgt_size"])

    def _session(self, graph: str, threads: int | None) -> ort.InferenceSession:
        options = session_options(threads)
        for name, value in self.shared.get(graph, []):
            options.add_initializer(name, value)
        return ort.InferenceSession(str(self.dir / graph), options, providers=["CPUExecutionProvider"])

    def encode(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The encoder's inputs (``src``, ``src_len``, ``src_ext`` (int64), ``features`` for a model with
        features) -> the initial state, by key."""
        out = self.encoder.run(None, {name: inputs[name] for name in self.encoder_inputs})
        return dict(zip(self.keys, out))

    def step(self, state: dict[str, np.ndarray], prev_ids: np.ndarray, n_ext: int) -> tuple[np.ndarray, dict]:
        """One decoder step: log-probabilities over V + ``n_ext`` (R, V + X), float32, and the state
        entries it changes (the recurrent keys and ``attn`` when the decoder attends)."""
        feed = {STATE + k: state[k] for k in self.keys}
        feed["prev_ids"] = np.ascontiguousarray(prev_ids, dtype=np.int64)
        # The graph has at least one extended slot (its size is symbolic from 1); with none in the batch,
        # the one slot (NEG everywhere: no source word maps to it) is cut off again.
        feed["ext_slots"] = np.zeros(max(1, n_ext), np.float32)
        out = self.decoder.run(None, feed)
        log_probs = out[0] if n_ext else out[0][:, : self.tgt_vocab]
        updates = {}
        for name, value in zip(self.step_outputs[1:], out[1:]):
            updates[name[len(NEXT) :] if name.startswith(NEXT) else name] = value
        return np.ascontiguousarray(log_probs), updates
