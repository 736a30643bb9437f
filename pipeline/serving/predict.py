"""``python -m pipeline.serving.predict``: raw text in (a file or stdin, one input a line), one output a line.

Two sources of a model:

* ``--checkpoint data/checkpoints/<task>/<mechanism> --task <task>``: the training stage's output,
  with the task's vocabularies (``data/vocab/<task>``), reader settings (``prepare.<task>``) and
  decoding settings (``evaluate``, the task's overrides applied) from ``--params`` (default: the
  repository's params.yaml; the data paths are relative to that file's directory). The same
  pyfunc object as the registered model is built locally: no MLflow store is involved.
* ``--model models:/<task>@champion`` (or any MLflow model URI): the registered model, loaded with
  ``mlflow.pyfunc.load_model`` from ``MLFLOW_TRACKING_URI`` (default: the repository's mlflow.db).

A model trained on a corpus with a features column (tags kept apart from the source,
docs/own_data.md) reads each line as ``text<TAB>features`` (``walk<TAB>V;PST``: the tags split as
the column was); a line without a tab has no features, and a line of more fields is an error.

``--show-copies`` marks each copied word ``[word]`` (a source word outside the decoder vocabulary
that the model copied) and appends a tab and the copied words; ``--beam N`` / ``--max-len N``
override the decoding settings. An empty input line gives an empty output line, so outputs stay
line-aligned with inputs.

The model's serving limits (``params['serving']``, or the registered model's ``serving.json``)
apply: every line is read (strict UTF-8) and checked before anything is decoded, and a line over
a limit, a line that is not UTF-8, a ``--beam``/``--max-len`` over its cap, a checkpoint of another
mechanism or vocabularies other than its own end the command with one line on stderr
(``copyseq predict: error: line N: ...``) and exit code 2, writing no output file. Lines are decoded
in chunks of ``max_inputs``, each within ``request_timeout_s``. A line whose source tokens are mostly
outside the vocabulary is decoded, with ``copyseq predict: warning: line N: ...`` on stderr.

``--runtime onnx`` decodes with an exported model (``copyseq export``, docs/export.md) on onnxruntime
and numpy, in a process that never imports torch: ``--model`` is then the export directory (read
without MLflow or pandas either) or the URI of a registered ONNX model (``models:/<task>_onnx@champion``);
its outputs equal the PyTorch model's. ``--runtime torch`` (the default) is the PyTorch predictor.
``--threads`` (onnxruntime's, 1 to the CPU count) goes with ``--runtime onnx`` and ``--device``
with ``--checkpoint``: elsewhere each would be ignored, and is refused instead.

Before any work, ``--output`` is refused when it is ``--input`` itself (the outputs would replace the
inputs), a directory, or a place that cannot be written; ``--checkpoint`` may name the ``model.pt``
of its directory.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import time
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from pathlib import Path
from types import ModuleType
from typing import BinaryIO, TextIO

from pipeline.config.arguments import OneLineParser, run_command
from pipeline.config.backbones import row_vocab_dir
from pipeline.config.params import project_root
from pipeline.config.schema import check_params_file
from pipeline.config.tasks import effective_params
from pipeline.config.validation import SettingsError
from pipeline.config.variants import resolve
from pipeline.io.files import atomic_path
from pipeline.serving.limits import InputRejected, ServingConfig, refusal_message
from pipeline.tracking.registry import REGISTERED_URI, serving_problem
from pipeline.tracking.runs import tracking_uri

PROG = "copyseq predict"
# The module each runtime decodes with, imported by name once the runtime is chosen (as models.registry
# imports the mechanisms): the torch runtime's modules import torch at their top, and a process on the
# onnx runtime must never load it. Each gives ``local_model``.
RUNTIMES = {"torch": "pipeline.serving.pyfunc", "onnx": "pipeline.serving.onnx_pyfunc"}
DEVICE_CHECK = "pipeline.runtime.device"  # the torch runtime's device check (imports torch)
EXPORT_MANIFEST = "manifest.json"  # an export directory's (pipeline.serving.onnx_model.MANIFEST)
CHECKPOINT_FILE = "model.pt"  # what a checkpoint directory holds
# The model URIs --model reads: the MLflow store's (models:/, runs:/) and local directories (a path, file://).
# Another scheme (http://, s3://) fails deep inside MLflow with a message that names nothing.
MODEL_SCHEMES = ("models", "runs", "file")
MODEL_URIS = "models:/<name>@<alias>, models:/<name>/<version>, runs:/<run_id>/<path> or a model directory"
SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]+):")  # two letters at least: not a drive letter


def max_threads() -> int:
    """The most onnxruntime threads ``--threads`` may ask for: this machine's CPU count (more only
    oversubscribes the cores; a huge count made onnxruntime spend minutes starting threads)."""
    return os.cpu_count() or 1


def check_model_uri(uri: str, option: str = "--model") -> None:
    """A PredictError naming ``option`` when ``uri`` has a scheme MLflow's loaders here cannot read."""
    match = SCHEME.match(uri)
    if match and match["scheme"].lower() not in MODEL_SCHEMES and not Path(uri).exists():  # a local "a:b" is a path
        raise PredictError(f"{option} {uri}: a {match['scheme']}: URI is not read here; give {MODEL_URIS}")


def checkpoint_dir(path: str | Path) -> Path:
    """``--checkpoint``'s directory: the path itself, or the directory of a ``model.pt`` named instead."""
    path = Path(path)
    return path.parent if path.name == CHECKPOINT_FILE and path.is_file() else path


def runtime_module(name: str) -> ModuleType:
    return importlib.import_module(RUNTIMES[name])


class PredictError(Exception):
    """A user error reported as one line on stderr with exit code 2 (no traceback)."""


class Refused(Exception):
    """A chunk of lines the model refused or stopped decoding: ``message``, and the offending line's
    row in the chunk when one is to blame."""

    def __init__(self, message: str, row: int | None = None) -> None:
        super().__init__(message)
        self.message, self.row = message, row


class ExportDirectory:
    """``--runtime onnx --model DIR``: the export decoded by
    :class:`pipeline.serving.onnx_predictor.OnnxPredictor` itself, as the pyfunc model would (the same
    checks, deadline and rows), in a process that imports neither MLflow nor pandas: their imports were
    most of its cold start (bench_export, benchmarks/README.md)."""

    def __init__(self, export_dir: str | Path, threads: int | None = None) -> None:
        onnx_predictor = importlib.import_module("pipeline.serving.onnx_predictor")  # onnxruntime: this runtime only
        self.predictor = onnx_predictor.OnnxPredictor(export_dir, threads=threads)

    def rows(self, data: dict, params: dict) -> list[dict]:
        timeout = float(self.predictor.config.request_timeout_s)
        try:
            return self.predictor.predict(
                data["text"],
                params.get("beam_size"),
                params.get("max_len"),
                deadline=time.monotonic() + timeout,
                pretokenized=params.get("pretokenized"),
                features=data.get("features"),
            )
        except Exception as err:
            message = refusal_message(err, timeout)
            if message is None:
                raise
            if isinstance(err, InputRejected) and err.index is not None:  # the line replaces the row number
                raise Refused(err.reason, err.index) from err
            raise Refused(message) from err


class PyfuncModel:
    """A local or a loaded pyfunc model (either runtime's), answering in rows as :class:`ExportDirectory`."""

    def __init__(self, model) -> None:
        self.model = model
        self.predictor = predictor_of(model)

    def rows(self, data: dict, params: dict) -> list[dict]:
        import pandas as pd  # only a pyfunc model needs pandas and MLflow
        from mlflow.exceptions import MlflowException

        try:
            frame = self.model.predict(pd.DataFrame(data), params=params or None)
        except MlflowException as exc:
            row = getattr(exc, "index", None)
            # a row to blame: the reason without the request's row number (the line replaces it)
            message = getattr(exc.__cause__, "reason", exc.message) if row is not None else exc.message
            raise Refused(message, row) from None
        return frame.to_dict("records")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = OneLineParser(
        prog=PROG,
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--checkpoint", help="a checkpoint directory data/checkpoints/<task>/<mechanism> (holds model.pt)"
    )
    source.add_argument("--model", help="an MLflow model URI, e.g. models:/copy_rules@champion")
    parser.add_argument("--task", help="the task of --checkpoint (default: the checkpoint's parent directory name)")
    parser.add_argument("--mechanism", help="the mechanism of --checkpoint (default: the checkpoint directory name)")
    parser.add_argument("--params", default=None, help="params file for --checkpoint (default: the repository's)")
    parser.add_argument("--vocab", default=None, help="vocabulary directory (default: data/vocab/<task>)")
    parser.add_argument("--input", default="-", help="input file, one text a line (default: stdin)")
    parser.add_argument("--output", default="-", help="output file (default: stdout)")
    parser.add_argument(
        "--show-copies", action="store_true", help="mark copied words [like this] and list them after a tab"
    )
    parser.add_argument("--beam", type=int, default=None, help="beam size (default: the evaluate settings)")
    parser.add_argument("--max-len", type=int, default=None, help="maximum output length")
    parser.add_argument(
        "--pretokenized",
        action="store_true",
        help="inputs are already the corpus's tokens, space-separated (not tokenised again)",
    )
    parser.add_argument(
        "--device",
        default=None,
        help="--checkpoint only: cpu | auto | cuda[:N] (default: cpu; ONNX decodes on the CPU)",
    )
    parser.add_argument(
        "--runtime",
        choices=sorted(RUNTIMES),
        default="torch",
        help="torch (default) | onnx: an exported model (--model DIR or models:/<task>_onnx@champion) on "
        "onnxruntime, without torch",
    )
    parser.add_argument(
        "--threads", type=int, default=None, help=f"--runtime onnx: onnxruntime's threads (1 to {max_threads()})"
    )
    args = parser.parse_args(argv)
    for name in ("beam", "max_len"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if args.model and (args.vocab or args.task or args.mechanism):
        parser.error("--task/--mechanism/--vocab go with --checkpoint; a registered model carries its own")
    if args.runtime == "onnx" and args.checkpoint:
        parser.error(
            "--runtime onnx reads an exported model: give its directory (copyseq export --out DIR) or its "
            "registered URI with --model"
        )
    if args.device is not None and not args.checkpoint:  # it would be ignored: say so rather than decode elsewhere
        where = (
            "--runtime onnx decodes on the CPU"
            if args.runtime == "onnx"
            else "a registered model decodes on the device of its own serving settings"
        )
        parser.error(f"--device {args.device}: {where}; --device goes with --checkpoint")
    if args.threads is not None and args.runtime != "onnx":
        parser.error(f"--threads {args.threads}: onnxruntime's threads, for --runtime onnx only")
    if args.threads is not None and not 1 <= args.threads <= max_threads():
        parser.error(f"--threads must be between 1 and {max_threads()} (this machine's CPUs), got {args.threads}")
    return args


def checkpoint_settings(
    checkpoint: str | Path,
    task: str | None = None,
    mechanism: str | None = None,
    params_file: str | Path | None = None,
    vocab: str | Path | None = None,
    **overrides,
) -> tuple[Path, ServingConfig, Path | None]:
    """What a checkpoint directory ``data/checkpoints/<task>/<row>`` is served with (the module
    docstring): (its vocabulary directory, its :class:`ServingConfig`, its subword model or None).
    ``overrides``: ServingConfig fields (``device``, ``pretokenized``). Also what ``copyseq export``
    reads for a checkpoint directory."""
    ckpt = checkpoint_dir(checkpoint)
    if not (ckpt / "model.pt").is_file():
        raise FileNotFoundError(f"{ckpt / 'model.pt'}: no trained model (run the train stage first)")
    task = task or ckpt.parent.name
    mechanism = mechanism or ckpt.name
    params = check_params_file(params_file)  # every setting checked first (one line when one is wrong)
    prepare = (params.get("prepare") or {}).get(task)
    if prepare is None:
        raise KeyError(f"params has no prepare.{task}: the reader settings that say how to tokenise raw text")
    evaluate = effective_params(params, task, mechanism).get("evaluate") or {}  # as its evaluate stage
    root = project_root(params_file)
    row = effective_params(params, task, mechanism)
    # a row on a pretrained backbone: the vocab stage's directory of its tokenizer
    vocab_dir = (
        Path(vocab)
        if vocab
        else row_vocab_dir(root / "data" / "vocab" / task, row.get("model"), resolve(row, mechanism).mechanism)
    )
    subword = root / "data" / "shards" / task / "subword.model"
    config = ServingConfig.from_params(task, mechanism, prepare, evaluate, params.get("serving"), **overrides)
    return vocab_dir, config, subword if prepare.get("subword") else None


def checkpoint_model(args: argparse.Namespace, runtime: ModuleType) -> PyfuncModel:
    """The local pyfunc object for ``--checkpoint`` (see the module docstring)."""
    directory = checkpoint_dir(args.checkpoint)
    vocab, config, subword = checkpoint_settings(
        directory,
        args.task,
        args.mechanism,
        args.params,
        args.vocab,
        device=args.device or "cpu",
        pretokenized=args.pretokenized,
    )
    return PyfuncModel(runtime.local_model(directory, vocab, config, subword))


def registered_model(uri: str, runtime: str, threads: int | None = None) -> PyfuncModel | ExportDirectory:
    """The model at ``uri`` for ``runtime`` (``torch`` | ``onnx``): an MLflow model URI, or for the onnx
    runtime an export directory too (:class:`ExportDirectory`). A store's refusal (no such model, a store
    that cannot be read) is a PredictError."""
    if runtime == "onnx" and (Path(uri) / EXPORT_MANIFEST).is_file():
        return ExportDirectory(uri, threads)
    check_model_uri(uri)
    import mlflow
    from mlflow.exceptions import MlflowException

    try:
        if runtime == "onnx":
            return PyfuncModel(runtime_module(runtime).load_model(uri, threads))  # refuses a PyTorch model (torch)
        mlflow.set_tracking_uri(tracking_uri())
        mlflow.set_registry_uri(tracking_uri())
        return PyfuncModel(mlflow.pyfunc.load_model(uri))
    except MlflowException as err:
        raise PredictError(registry_message(uri) or err.message) from None


def registry_message(uri: str) -> str | None:
    """For a ``models:/`` URI the registry cannot resolve: what it lacks and what it holds (the
    versions and aliases of the name, or the names registered), and where the alias comes from."""
    match = REGISTERED_URI.match(uri)
    if match is None:
        return None
    problem = serving_problem(tracking_uri(), match["name"], match["alias"] or match["version"])
    if problem is None:
        return None
    hint = "; the compare stage sets the alias champion (copyseq run TASK --compare, or copyseq repro)"
    return f"{uri}: {problem}" + (hint if match["alias"] == "champion" else "")


def marked(tokens: list[str], copied: list[str], output: str) -> str:
    """The output with every copied token in brackets (tokens re-joined as the output was)."""
    if not copied:
        return output
    joiner = "" if len(tokens) > 1 and output == "".join(tokens) else " "  # LCSTS outputs have no spaces
    copied_set = set(copied)
    # a token that carries its leading space (a backbone's piece as the text it adds) keeps it outside
    return joiner.join(
        f"{t[: len(t) - len(t.lstrip())]}[{t.lstrip()}]" if t in copied_set and t.strip() else t for t in tokens
    )


def format_rows(rows: Sequence[dict], show_copies: bool) -> list[str]:
    lines = []
    for row in rows:
        copied, tokens = list(row["copied"]), list(row["tokens"])
        lines.append(f"{marked(tokens, copied, row['output'])}\t{' '.join(copied)}" if show_copies else row["output"])
    return lines


def read_lines(inp: BinaryIO | TextIO) -> list[str]:
    """The input's lines without their line ends; a line that is not UTF-8 is a PredictError naming it
    (a byte stream is decoded strictly; a text stream's undecodable bytes, surrogate-escaped, are found too)."""
    texts = []
    for number, line in enumerate(inp, 1):
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError as err:
                raise PredictError(
                    f"line {number}: not valid UTF-8 (byte 0x{line[err.start]:02x} at byte {err.start + 1})"
                ) from None
        else:
            try:
                line.encode("utf-8")
            except UnicodeEncodeError as err:
                raise PredictError(
                    f"line {number}: not valid UTF-8 (undecodable byte at character {err.start + 1})"
                ) from None
        if number == 1:
            line = line.removeprefix("\ufeff")  # a UTF-8 byte-order mark
        texts.append(line.rstrip("\r\n"))
    return texts


def predictor_of(model):
    """The :class:`pipeline.serving.predictor.Predictor` inside a local or a loaded pyfunc model; None
    for a model logged before the serving limits existed (its own code checks nothing up front)."""
    python_model = getattr(model, "python_model", None)
    if python_model is None and hasattr(model, "unwrap_python_model"):
        python_model = model.unwrap_python_model()
    predictor = getattr(python_model, "predictor", None)
    return predictor if hasattr(predictor, "check_text") else None


def features_fields(lines: Sequence[str]) -> tuple[list[str], list[str]]:
    """Lines ``text<TAB>features`` (a model with features) -> (texts, features); a line without a tab
    has no features ('')."""
    texts, features = [], []
    for number, line in enumerate(lines, 1):
        fields = line.split("\t")
        if len(fields) > 2:
            raise PredictError(f"line {number}: {len(fields)} tab-separated fields; a line is text<TAB>features")
        texts.append(fields[0])
        features.append(fields[1] if len(fields) == 2 else "")
    return texts, features


def check_all(
    predictor,
    texts: Sequence[str],
    beam: int | None,
    max_len: int | None,
    pretokenized: bool | None = None,
    features: Sequence[str] | None = None,
) -> None:
    """Every limit, for every line, before anything is decoded: the first violation as a PredictError."""
    try:
        predictor.check_params(beam, max_len)
    except InputRejected as err:
        raise PredictError(str(err).replace("beam_size=", "--beam ").replace("max_len=", "--max-len ")) from None
    for i, text in enumerate(texts):
        try:
            predictor.check_text(i, text, pretokenized)
            if features is not None:
                predictor.check_features(i, features[i])
        except InputRejected as err:
            raise PredictError(f"line {i + 1}: {err.reason}") from None


def chunks(n: int, size: int) -> Iterable[tuple[int, int]]:
    return ((start, min(n, start + size)) for start in range(0, n, size))


def run(args: argparse.Namespace, inp: BinaryIO | TextIO, out: TextIO, err: TextIO | None = None) -> int:
    """Decode every line of ``inp`` into ``out``; warnings to ``err`` (stderr). Returns the line count."""
    err = err or sys.stderr
    texts = read_lines(inp)
    runtime = getattr(args, "runtime", "torch")
    try:
        if args.checkpoint:
            model = checkpoint_model(args, runtime_module(runtime))
        else:
            model = registered_model(args.model, runtime, getattr(args, "threads", None))
    except KeyError as exc:  # params without the task's settings
        raise PredictError(str(exc.args[0]) if exc.args else repr(exc)) from None
    except ValueError as exc:  # CheckpointError (another mechanism, other vocabularies), bad settings
        raise PredictError(str(exc)) from None
    if not texts:
        return 0
    predictor = model.predictor
    size, features = len(texts), None
    if getattr(predictor, "features_vocab", None) is not None:  # a model with features: text<TAB>features
        texts, features = features_fields(texts)
    if predictor is not None:
        pretokenized = True if args.pretokenized else None
        check_all(predictor, texts, args.beam, args.max_len, pretokenized, features)
        size = predictor.config.max_inputs
    params = {k: v for k, v in (("beam_size", args.beam), ("max_len", args.max_len)) if v is not None}
    if args.pretokenized:  # a registered model's own tokeniser is skipped too (a request param)
        params["pretokenized"] = True
    lines = []
    for start, stop in chunks(len(texts), size):
        data = {"text": texts[start:stop], **({"features": features[start:stop]} if features else {})}
        try:
            rows = model.rows(data, params)
        except Refused as exc:
            where = f"line {start + 1}" if stop - start == 1 else f"lines {start + 1}-{stop}"
            if exc.row is not None:
                where = f"line {start + exc.row + 1}"
            raise PredictError(f"{where}: {exc.message}") from None
        for i, row in enumerate(rows):
            if row.get("warning"):
                print(f"{PROG}: warning: line {start + i + 1}: {row['warning']}", file=err)
        lines += format_rows(rows, args.show_copies)
    for line in lines:
        out.write(line.replace("\n", " ") + "\n")
    return len(texts)


def check_output(args: argparse.Namespace) -> None:
    """``--output`` refused before any work when writing it would lose the input or fail after decoding:
    the same file as ``--input``, a directory, or a parent that is a file."""
    if args.output == "-":
        return
    out = Path(args.output)
    inp = Path(args.input)
    if args.input != "-" and (
        out.resolve() == inp.resolve() or (out.exists() and inp.exists() and os.path.samefile(out, inp))
    ):
        raise PredictError(
            f"--input {args.input} and --output {args.output} are the same file: the outputs would replace the "
            "inputs; give another --output"
        )
    if out.is_dir():
        raise PredictError(f"--output {args.output}: is a directory; give a file path")
    parent = next((p for p in out.absolute().parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise PredictError(f"--output {args.output}: {parent} is a file, not a directory")


def open_input(path: str) -> BinaryIO:
    """``--input``, opened; what stops it is a PredictError naming ``--input``."""
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise PredictError(f"--input {path}: no such file") from None
    except IsADirectoryError:
        raise PredictError(f"--input {path}: is a directory; give a file, one text a line") from None
    except OSError as err:
        raise PredictError(f"--input {path}: cannot read it ({err.strerror or err})") from None


def write_output(args: argparse.Namespace, inp: BinaryIO | TextIO) -> None:
    """Decode into ``--output`` atomically (the file appears whole, or not at all); a place that cannot
    be written is refused naming ``--output`` (not the temporary file beside it) before decoding."""
    with ExitStack() as stack:
        try:
            tmp = stack.enter_context(atomic_path(Path(args.output)))
            out = stack.enter_context(open(tmp, "w", encoding="utf-8"))
        except OSError as err:
            raise PredictError(f"--output {args.output}: cannot write there ({err.strerror or err})") from None
        run(args, inp, out)


def main(argv: Sequence[str] | None = None) -> int:
    """The command; 0 on success, 2 (one line on stderr, no traceback) on a user error: a line that
    is not UTF-8 or over a serving limit, a checkpoint that does not fit its settings, a missing file."""
    args = parse_args(argv)
    try:
        check_output(args)
        if args.checkpoint:  # before any input is read (on a missing GPU, model.pt would look corrupt)
            importlib.import_module(DEVICE_CHECK).check_device(args.device or "cpu", "--device")
        inp = sys.stdin.buffer if args.input == "-" and hasattr(sys.stdin, "buffer") else sys.stdin
        inp = inp if args.input == "-" else open_input(args.input)
        try:
            if args.output == "-":
                run(args, inp, sys.stdout)
            else:
                write_output(args, inp)
        finally:
            if args.input != "-":
                inp.close()
    except BrokenPipeError:
        raise  # the reader of stdout stopped (| head): run_command ends quietly
    except (PredictError, SettingsError, OSError) as err:
        return fail(str(err))
    return 0


def fail(message: str) -> int:
    print(f"{PROG}: error: {message.strip().splitlines()[0] if message.strip() else message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(run_command(main))
