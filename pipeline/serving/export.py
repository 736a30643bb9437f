"""``copyseq export`` (``python -m pipeline.serving.export``): a trained model as ONNX graphs that
onnxruntime serves without torch, or (``--format hf``) a copy head on a backbone as a Hugging Face
model folder (:func:`pipeline.serving.hf_export.write_hf`).

Sources:

* ``MODEL_DIR``: a checkpoint directory ``data/checkpoints/<task>/<row>`` (what ``predict --checkpoint``
  reads: ``model.pt``, with the task's vocabularies and settings from ``--params``), or a logged model's
  directory (``MLmodel`` and ``artifacts/`` with ``model.pt``, the vocabularies and ``serving.json``);
* ``--model URI``: a registered or logged model (``models:/<task>@champion``), downloaded from
  ``MLFLOW_TRACKING_URI`` (default: the repository's mlflow.db).

``--out DIR`` receives (docs/export.md): ``encoder.onnx`` and ``step.onnx`` (opset 18,
:mod:`pipeline.serving.onnx_graphs`) with their weights in ``weights.bin`` (each tensor once,
:mod:`pipeline.serving.onnx_weights`), ``src.vocab``/``tgt.vocab`` (and ``features.vocab``,
``subword.model`` where the task has them), ``serving.json`` (the serving settings and limits, with the
sha256 of every file) and ``manifest.json`` (the mechanism, every graph input and output with its
shape, the state keys, the opset, the sha256 of the source ``model.pt``, the decoding settings, the
exporter versions and the numeric check). Before anything is written the graphs are run against the
PyTorch model on two batches of other sizes than the traced one for several steps: a
log-probability off by more than :data:`CHECK_TOLERANCE` refuses the export. ``--out`` may be new,
empty, or an earlier export of the same format holding only an export's files (:func:`check_out_dir`),
replaced once the new export is complete; any other directory is refused and kept whole.

``--int8``: once the float graphs pass that check, their matrix and embedding weights are stored as
int8 (:mod:`pipeline.serving.onnx_quantize`), and the manifest's ``quantization`` records how far the
int8 graphs are from PyTorch on the same check (an approximation: no tolerance refuses it).

``--log`` (with ``--model``): the export is logged as the model ``model_onnx`` of the source model's
run and registered as a version of ``<name>_onnx`` with the source's alias
(:mod:`pipeline.serving.onnx_pyfunc`): ``mlflow models serve -m models:/<task>_onnx@champion``.

A model on a pretrained backbone exports its decoder with the key/value cache as state
(:mod:`pipeline.serving.onnx_backbone`) and its tokenizer beside the graphs. A model that cannot be
exported (Read-Again over several sentences whose ``sentence_end`` tokens are not all in the source
vocabulary, as the graph finds sentence ends by source ids) is refused with one line naming what is
supported, exit code 2, and so is any other user error (a missing file, bad settings, an unknown URI).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import onnxscript
import torch
from onnxruntime.capi import onnxruntime_pybind11_state as ort_errors

from models.extended import NEG
from models.registry import runs_on_backbone
from models.specials import BOS, SPECIALS
from pipeline.config.arguments import OneLineParser, run_command
from pipeline.config.validation import SettingsError
from pipeline.io.files import sha256_file, sha256_tree, write_json_atomic
from pipeline.serving.limits import DECODE_KEYS, ServingConfig
from pipeline.serving.onnx_backbone import export_backbone_graphs
from pipeline.serving.onnx_graphs import (
    ENCODER_FILE,
    OPSET,
    STEP_FILE,
    GraphSpecs,
    export_graphs,
    probe_batch,
    probe_inputs,
    sentence_end_ids,
    untraceable,
)
from pipeline.serving.onnx_model import FORMAT, MANIFEST, OnnxModel
from pipeline.serving.onnx_predictor import SERVING_JSON
from pipeline.serving.onnx_pyfunc import download_model, log_onnx_model, register_twin
from pipeline.serving.onnx_quantize import describe, quantize_graphs
from pipeline.serving.onnx_weights import WEIGHTS_FILE, shared_segments
from pipeline.serving.predict import PredictError, check_model_uri, checkpoint_dir, checkpoint_settings
from pipeline.training.checkpoints import load_file, load_model
from pipeline.vocab.tokenizer import RECORD, TOKENIZER_DIR
from pipeline.vocab.vocabulary import FEATURES_VOCAB, Vocab

PROG = "copyseq export"
# Every name an ONNX export writes in its directory: an earlier export holding anything else holds the user's
# files, and is not replaced (that would delete them).
ONNX_FILES = frozenset(
    {
        ENCODER_FILE,
        STEP_FILE,
        WEIGHTS_FILE,
        MANIFEST,
        SERVING_JSON,
        "src.vocab",
        "tgt.vocab",
        FEATURES_VOCAB,
        "subword.model",
        TOKENIZER_DIR,
        RECORD,
    }
)
HF_EXPORT = "pipeline.serving.hf_export"  # --format hf: imported by name (it loads transformers' generation code)
CHECK_TOLERANCE = 1e-3  # the largest |log p_onnx - log p_torch| an export may show on its check batches
CHECK_PROBES = ((1, 6, 1), (4, 9, 2))  # (rows, source length, OOV slots): other sizes than the traced ones
CHECK_STEPS = 8
SUPPORTED = (
    "CopyNet, the pointer-generator (with or without coverage), Pointer Softmax, WEAN, Luong, RNNSearch and "
    "Enc-Dec, on the recurrent or the Transformer decoder, over the BiGRU or the Transformer encoder; "
    "Read-Again + copy (GRU or LSTM read-again, one sentence or several); the copy heads on a pretrained "
    "BART, T5 or Marian (backbone_pointer_generator, backbone_copynet, backbone_pointer_softmax, backbone_lm) "
    "(docs/export.md)"
)


class ExportRefused(Exception):
    """An export that cannot be done as asked: one line on stderr, exit code 2."""


@dataclass(frozen=True)
class Source:
    """A trained model's files and serving settings, wherever they came from."""

    model_pt: Path
    vocab_dir: Path  # holds src.vocab, tgt.vocab (and features.vocab)
    config: ServingConfig
    subword_model: Path | None
    described: str  # the directory or URI the user named
    run_id: str | None = None


def source_from_dir(path: Path, args: argparse.Namespace) -> Source:
    """A checkpoint directory (``model.pt``) or a logged model's directory (``artifacts/serving.json``)."""
    artifacts = path / "artifacts"
    if (artifacts / "serving.json").is_file():
        config = ServingConfig.from_dict(json.loads((artifacts / "serving.json").read_text(encoding="utf-8")))
        subword = artifacts / "subword.model"
        return Source(
            artifacts / "model.pt",
            artifacts,
            config,
            subword if subword.is_file() else None,
            str(path),
        )
    if not (path / "model.pt").is_file():
        raise ExportRefused(
            f"{path}: neither a checkpoint directory (model.pt) nor a logged model (artifacts/serving.json)"
        )
    return checkpoint_source(path, args.task, args.mechanism, args.params, args.vocab)


def checkpoint_source(
    checkpoint: Path, task: str | None, row: str | None, params_file: str | None, vocab: str | None = None
) -> Source:
    """A checkpoint directory of the training stage, with its task's vocabularies and serving settings
    from ``params_file`` (what ``predict --checkpoint`` reads)."""
    vocab_dir, config, subword = checkpoint_settings(checkpoint, task, row, params_file, vocab)
    return Source(checkpoint / "model.pt", vocab_dir, config, subword, str(checkpoint))


def input_example(model_dir: Path) -> list[str] | None:
    """The texts of a logged model's input example (``input_example.json``), to log with its twin."""
    path = model_dir / "input_example.json"
    if not path.is_file():
        return None
    example = json.loads(path.read_text(encoding="utf-8"))
    columns, rows = example.get("columns") or [], example.get("data") or []
    if "text" not in columns:
        return None
    return [row[columns.index("text")] for row in rows] or None


def _reason(err: BaseException) -> str:
    """The first line of the innermost error (torch.export wraps the one that says what failed)."""
    while err.__cause__ is not None:
        err = err.__cause__
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(err)).strip()  # no terminal colours
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"


@torch.no_grad()
def check_graphs(model: torch.nn.Module, export_dir: Path, src_vocab: Vocab) -> tuple[float, float]:
    """The largest |log p| difference between the graphs (onnxruntime) and ``model`` (PyTorch) over
    :data:`CHECK_STEPS` steps of :data:`CHECK_PROBES` (both fed PyTorch's best word each step), over
    the entries PyTorch gives a probability (above NEG / 2), and the share of those steps' rows where
    both put the same word first."""
    onnx_model = OnnxModel(export_dir, threads=1)
    end_ids = sentence_end_ids(model, src_vocab)
    worst, same, rows_seen = 0.0, 0, 0
    for seed, (rows, steps, n_ext) in enumerate(CHECK_PROBES, start=100):
        src, src_len, src_ext, features = probe_inputs(model, rows, steps, n_ext, seed, end_ids)
        words = [[src_vocab.token(i) for i in row[:n]] for row, n in zip(src.tolist(), src_len.tolist())]
        state = model.encode(probe_batch(src, src_len, src_ext, n_ext, features, src_tokens=words))
        inputs = {"src": src.numpy(), "src_len": src_len.numpy(), "src_ext": src_ext.numpy()}
        if features is not None:
            inputs["features"] = features.numpy()
        onnx_state = onnx_model.encode(inputs)
        prev = torch.full((rows,), BOS, dtype=torch.long)
        for _ in range(CHECK_STEPS):
            log_probs, state = model.step(state, prev)
            onnx_log_probs, updates = onnx_model.step(onnx_state, prev.numpy(), n_ext)
            onnx_state.update(updates)
            want = log_probs.float().numpy()
            live = want > NEG / 2
            worst = max(worst, float(np.abs(onnx_log_probs[live] - want[live]).max()))
            prev = log_probs.argmax(-1)
            same += int((onnx_log_probs.argmax(-1) == prev.numpy()).sum())
            rows_seen += rows
    return worst, same / rows_seen


# onnxruntime's errors when a graph does not run (each derives from Exception: no common base class)
GRAPH_RUN_ERRORS = (
    ort_errors.Fail,
    ort_errors.InvalidArgument,
    ort_errors.InvalidGraph,
    ort_errors.NotImplemented,
    ort_errors.RuntimeException,
)


def _checked(
    source: Source, model: torch.nn.Module, export_dir: Path, src_vocab: Vocab, graphs: str
) -> tuple[float, float]:
    """:func:`check_graphs`, with graphs that onnxruntime cannot run on the check's inputs refused in one
    line (``graphs``: which ones, as the message names them)."""
    try:
        return check_graphs(model, export_dir, src_vocab)
    except GRAPH_RUN_ERRORS as err:
        raise ExportRefused(
            f"{source.described}: the {graphs} ONNX graphs of this {source.config.mechanism} model do not run on the "
            f"check's inputs ({_reason(err)}); supported: {SUPPORTED}"
        ) from None


def _graph_entry(path: Path, inputs, outputs) -> dict:
    return {
        "file": path.name,
        "sha256": sha256_file(path),
        "inputs": [s.as_dict() for s in inputs],
        "outputs": [s.as_dict() for s in outputs],
    }


def manifest(
    source: Source,
    ckpt: dict,
    specs: GraphSpecs,
    out: Path,
    vocabs: tuple[Vocab, Vocab],
    diff: float | None,
    quantization: dict | None = None,
) -> dict:
    """The export's description (module docstring); ``diff`` is the float graphs' check, ``quantization``
    the int8 graphs' description and check (None: float32 weights)."""
    cfg = source.config
    return {
        "format": FORMAT,
        "task": cfg.task,
        "mechanism": cfg.mechanism,
        "base_mechanism": ckpt.get("mechanism") or cfg.mechanism,
        "opset": OPSET,
        "exporter": {
            "torch": torch.__version__,
            "onnx": onnx.__version__,
            "onnxscript": onnxscript.__version__,
            "onnxruntime": onnxruntime.__version__,
            "dynamo": True,
        },
        "source": {"model": source.described, "sha256": sha256_file(source.model_pt), "run_id": source.run_id},
        "graphs": {
            "encoder": _graph_entry(out / ENCODER_FILE, specs.encoder_inputs, specs.encoder_outputs),
            "step": _graph_entry(out / STEP_FILE, specs.step_inputs, specs.step_outputs),
        },
        "weights": {  # both graphs' initializers; those both read, loaded once for both
            "file": WEIGHTS_FILE,
            "sha256": sha256_file(out / WEIGHTS_FILE),
            "shared": shared_segments(out, [ENCODER_FILE, STEP_FILE]),
        },
        "state": {
            "keys": list(specs.keys),
            "recurrent": list(specs.recurrent),
            "static": [k for k in specs.keys if k not in specs.recurrent],
            "attention": specs.attention,
        },
        "axes": {
            "batch": "rows: examples x beam",
            "src": "source positions",
            "ext": "extended (source OOV) slots of the batch, at least 1",
            "vocab_ext": "V + ext",
            "cache": "decoder positions so far (Transformer key/value caches)",
        },
        "vocab": {"src_size": len(vocabs[0]), "tgt_size": len(vocabs[1]), "specials": list(SPECIALS)},
        "decoding": {k: getattr(cfg, k) for k in DECODE_KEYS},
        "check": {
            "max_abs_log_prob_diff": diff,
            "tolerance": CHECK_TOLERANCE,
            "probes": [list(p) for p in CHECK_PROBES],
        },
        "quantization": quantization,
    }


def export_onnx(source: Source, out_dir: Path, int8: bool = False) -> dict:
    """Export ``source`` into ``out_dir`` (replaced as a whole, only once everything is written and
    checked); returns the manifest. ``int8``: once the float graphs pass the check, their matrix and
    embedding weights are stored as int8 (:mod:`pipeline.serving.onnx_quantize`), and the manifest
    records how far those graphs are from PyTorch on the same check."""
    ckpt = load_file(source.model_pt)
    base = ckpt.get("mechanism") or source.config.mechanism
    on_backbone = runs_on_backbone(base)
    vocabs = (Vocab.load(source.vocab_dir / "src.vocab"), Vocab.load(source.vocab_dir / "tgt.vocab"))
    model, ckpt = load_model(source.model_pt, source.config.mechanism, "cpu", vocabs)
    why = None if on_backbone else untraceable(model, vocabs[0])  # a backbone's decoder: onnx_backbone
    if why is not None:
        raise ExportRefused(
            f"{source.described}: a {source.config.mechanism} model is not exported to ONNX: {why}; "
            f"supported: {SUPPORTED}"
        )
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out_dir.name}-", dir=out_dir.parent) as tmp:
        work = Path(tmp)
        try:
            if on_backbone:
                specs = export_backbone_graphs(model, work)
            else:
                specs = export_graphs(model, work, sentence_end_ids(model, vocabs[0]))
        except Exception as err:  # noqa: BLE001 - torch.export's many errors: the model cannot be traced
            raise ExportRefused(
                f"{source.described}: a {source.config.mechanism} model cannot be exported to ONNX "
                f"({_reason(err)}); supported: {SUPPORTED}"
            ) from None
        write_json_atomic(work / MANIFEST, manifest(source, ckpt, specs, work, vocabs, None))  # what the check reads
        diff, _ = _checked(source, model, work, vocabs[0], "float32")
        if not diff <= CHECK_TOLERANCE:
            raise ExportRefused(
                f"{source.described}: the ONNX graphs of this {source.config.mechanism} model differ from PyTorch by "
                f"{diff:.3g} in a log-probability (more than {CHECK_TOLERANCE:g}); supported: {SUPPORTED}"
            )
        quantization = None
        if int8:
            quantize_graphs(work, [ENCODER_FILE, STEP_FILE])
            write_json_atomic(work / MANIFEST, manifest(source, ckpt, specs, work, vocabs, diff, {}))
            int8_diff, same_first = _checked(source, model, work, vocabs[0], "int8")
            quantization = {**describe(), "max_abs_log_prob_diff": int8_diff, "same_first_word": same_first}
        for name in ("src.vocab", "tgt.vocab", FEATURES_VOCAB):
            if (source.vocab_dir / name).is_file():
                shutil.copyfile(source.vocab_dir / name, work / name)
        if source.subword_model is not None:
            shutil.copyfile(source.subword_model, work / "subword.model")
        if (source.vocab_dir / RECORD).is_file():  # a backbone's tokenizer, for the predictor
            shutil.copytree(source.vocab_dir / TOKENIZER_DIR, work / TOKENIZER_DIR)
            shutil.copyfile(source.vocab_dir / RECORD, work / RECORD)
        info = manifest(source, ckpt, specs, work, vocabs, diff, quantization)
        write_json_atomic(work / MANIFEST, info)
        files = {p.name: sha256_tree(p) for p in sorted(work.iterdir()) if p.name != "serving.json"}
        extra = {**source.config.extra, "exported_from": source.described}
        config = replace(source.config, device="cpu", files=files, extra=extra)
        write_json_atomic(work / "serving.json", asdict(config))
        install(work, out_dir, "onnx")
    return info


def install(work: Path, out_dir: Path, fmt: str) -> None:
    """Move the finished export ``work`` (a temporary directory beside ``out_dir``) to ``out_dir``. An
    earlier export there is replaced, after checking it again (:func:`check_out_dir`): files the user
    put in it meanwhile make this an :class:`ExportRefused`, and every one of them is kept."""
    if out_dir.exists() or out_dir.is_symlink():
        check_out_dir(out_dir, fmt)
        shutil.rmtree(out_dir)
    mask = os.umask(0)
    os.umask(mask)
    work.chmod(0o777 & ~mask)  # a directory as any other the user makes (mkdtemp's is private)
    work.rename(out_dir)
    work.mkdir()  # the temporary directory's own cleanup expects it


def write_hf_export(source: Source, out_dir: Path) -> Path:
    """``--format hf``: the Hugging Face folder written beside ``out_dir``, then moved there whole
    (:func:`install`), so that a failure leaves ``out_dir`` as it was."""
    decoding = {key: getattr(source.config, key) for key in DECODE_KEYS}  # the row's, as predict decodes
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out_dir.name}-", dir=out_dir.parent) as tmp:
        importlib.import_module(HF_EXPORT).write_hf(
            source.model_pt.parent, Path(tmp), vocab_dir=source.vocab_dir, decoding=decoding
        )
        install(Path(tmp), out_dir, "hf")
    return out_dir


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = OneLineParser(
        prog=PROG, description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "model_dir", nargs="?", help="a checkpoint directory (or its model.pt) or a logged model's directory"
    )
    parser.add_argument("--model", help="an MLflow model URI, e.g. models:/copy_rules@champion")
    parser.add_argument(
        "--out",
        required=True,
        help="the directory to write: new, empty, or an earlier export of the same format holding only its own "
        "files (replaced)",
    )
    parser.add_argument("--format", choices=("onnx", "hf"), default="onnx", help="onnx (default) | hf")
    parser.add_argument(
        "--log", action="store_true", help="with --model: log the ONNX model into its run and register its twin"
    )
    parser.add_argument("--params", default=None, help="params file for a checkpoint directory")
    parser.add_argument("--task", help="the task of a checkpoint directory (default: its parent's name)")
    parser.add_argument("--mechanism", help="the row of a checkpoint directory (default: its name)")
    parser.add_argument("--vocab", default=None, help="vocabulary directory (default: data/vocab/<task>)")
    parser.add_argument(
        "--int8",
        action="store_true",
        help="store the matrix and embedding weights as int8 (a quarter of their size; an approximation: "
        "docs/export.md)",
    )
    args = parser.parse_args(argv)
    if bool(args.model_dir) == bool(args.model):
        parser.error("give one model: MODEL_DIR or --model URI")
    if args.log and not args.model:
        parser.error("--log needs --model: the ONNX model is logged into the registered model's run")
    if args.log and args.format != "onnx":
        parser.error("--log logs an ONNX export (--format onnx)")
    if args.int8 and args.format != "onnx":
        parser.error("--int8 quantizes an ONNX export (--format onnx)")
    return args


def earlier_onnx_export(out: Path) -> str | None:
    """None when ``out`` is an earlier ONNX export (its manifest parses and is this exporter's format),
    else why it is not one."""
    try:
        manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"no {MANIFEST} in it"
    except (OSError, ValueError):  # a directory of that name, not UTF-8, not JSON
        return f"its {MANIFEST} is not JSON"
    ours = isinstance(manifest, dict) and manifest.get("format") == FORMAT
    if not (ours and isinstance(manifest.get("graphs"), dict) and isinstance(manifest.get("exporter"), dict)):
        return f"its {MANIFEST} is not a copyseq export manifest of format {FORMAT}"
    return None


def _names(paths: list[Path], most: int = 5) -> str:
    shown = [f"{p.name}/" if p.is_dir() else p.name for p in paths[:most]]
    return ", ".join(shown) + (f" and {len(paths) - most} more" if len(paths) > most else "")


def _writable(out: Path) -> None:
    """``--out``'s nearest existing directory takes the temporary directory the export is written in (an
    ExportRefused naming ``--out`` otherwise, before any work)."""
    parent = next((p for p in out.absolute().parents if p.exists()), None)
    if parent is None:
        return
    if not parent.is_dir():
        raise ExportRefused(f"--out {out}: {parent} is a file, not a directory (nothing was written)")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=f".{out.name}-", dir=parent))
    except OSError as err:
        raise ExportRefused(
            f"--out {out}: cannot write in {parent} ({err.strerror or err}) (nothing was written)"
        ) from None


def check_out_dir(out: Path, fmt: str) -> None:
    """``--out`` may be new, empty, or an earlier export of the same format (recognised by its manifest,
    or for hf its config) holding only the export's own files, which is replaced. Anything else is refused
    before anything is read, so no user's file is ever deleted."""
    if out.is_symlink():
        raise ExportRefused(f"--out {out}: a symbolic link; give the directory itself (nothing was written)")
    if out.exists() and not out.is_dir():
        raise ExportRefused(
            f"--out {out}: exists and is not an earlier {fmt} export (a file); give a new or empty directory "
            "(nothing was written)"
        )
    entries = sorted(out.iterdir()) if out.exists() else []
    if entries:
        hf = importlib.import_module(HF_EXPORT) if fmt == "hf" else None
        why = hf.earlier_export(out) if hf else earlier_onnx_export(out)
        if why is not None:
            raise ExportRefused(
                f"--out {out}: exists and is not an earlier {fmt} export ({why}); give a new or empty directory "
                "(nothing was written)"
            )
        extra = [p for p in entries if not (hf.own_file(p.name) if hf else p.name in ONNX_FILES)]
        if extra:
            raise ExportRefused(
                f"--out {out}: an earlier {fmt} export that also holds {_names(extra)}, not files of the export; "
                "move them out or give another directory (nothing was written)"
            )
    _writable(out)


def run(args: argparse.Namespace, tmp: Path) -> None:
    check_out_dir(Path(args.out), args.format)
    if args.model:
        check_model_uri(args.model)
        model_dir, run_id = download_model(args.model, tmp)
        source = replace(source_from_dir(model_dir, args), described=args.model, run_id=run_id)
    else:
        model_dir = checkpoint_dir(args.model_dir)  # model.pt itself names its directory
        source = source_from_dir(model_dir, args)
    out = Path(args.out)
    if args.format == "hf":
        print(f"{PROG}: wrote {write_hf_export(source, out)}")
        return
    info = export_onnx(source, out, int8=args.int8)
    print(
        f"{PROG}: wrote {out} ({info['mechanism']}, opset {info['opset']}, state {len(info['state']['keys'])} "
        f"tensors; largest log-probability difference to PyTorch {info['check']['max_abs_log_prob_diff']:.2g})"
    )
    if info["quantization"]:
        q = info["quantization"]
        print(
            f"{PROG}: int8 weights: largest log-probability difference to PyTorch {q['max_abs_log_prob_diff']:.2g}, "
            f"the same first word in {q['same_first_word']:.1%} of the check's steps"
        )
    if args.log:
        uri = log_onnx_model(source.run_id, out, input_example(model_dir))
        name, version = register_twin(uri, args.model, source.config.task, source.config.mechanism)
        print(f"{PROG}: logged {uri} and registered {name} version {version}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        with tempfile.TemporaryDirectory(prefix="copyseq-export-") as tmp:
            run(args, Path(tmp))
    except (ExportRefused, PredictError, SettingsError, ValueError, KeyError, OSError) as err:  # StoreError: MLflow's
        return fail(str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err))
    return 0


def fail(message: str) -> int:
    print(f"{PROG}: error: {message.strip().splitlines()[0] if message.strip() else message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(run_command(main))
