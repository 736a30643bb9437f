"""``python -m pipeline.tracking.predict``: raw text in (a file or stdin, one input a line), one output a line.

Two sources of a model:

* ``--checkpoint data/checkpoints/<task>/<mechanism> --task <task>``: the training stage's output,
  with the task's vocabularies (``data/vocab/<task>``), reader settings (``prepare.<task>``) and
  decoding settings (``evaluate``, the task's overrides applied) from ``--params`` (default: the
  repository's params.yaml; the data paths are relative to that file's directory). The same
  pyfunc object as the registered model is built locally: no MLflow store is involved.
* ``--model models:/<task>@champion`` (or any MLflow model URI): the registered model, loaded with
  ``mlflow.pyfunc.load_model`` from ``MLFLOW_TRACKING_URI`` (default: the repository's mlflow.db).

``--show-copies`` marks each copied word ``[word]`` (a source word outside the decoder vocabulary
that the model copied) and appends a tab and the copied words; ``--beam N`` / ``--max-len N``
override the decoding settings. An empty input line gives an empty output line, so outputs stay
line-aligned with inputs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import pandas as pd


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="copyseq-predict",
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
        help="--checkpoint only: inputs are already the corpus's tokens, space-separated",
    )
    parser.add_argument("--device", default="cpu", help="--checkpoint only: cpu | auto | cuda[:N] (default: cpu)")
    args = parser.parse_args(argv)
    for name in ("beam", "max_len"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if args.model and (args.pretokenized or args.vocab or args.task or args.mechanism):
        parser.error(
            "--task/--mechanism/--vocab/--pretokenized go with --checkpoint; a registered model carries its own"
        )
    return args


def checkpoint_model(args: argparse.Namespace):
    """The local pyfunc object for ``--checkpoint`` (see the module docstring)."""
    from pipeline.params import load_params, project_root
    from pipeline.tasks import effective_params
    from pipeline.tracking.serving import ServingConfig, local_model

    ckpt = Path(args.checkpoint)
    if not (ckpt / "model.pt").is_file():
        raise FileNotFoundError(f"{ckpt / 'model.pt'}: no trained model (run the train stage first)")
    task = args.task or ckpt.parent.name
    mechanism = args.mechanism or ckpt.name
    params = load_params(args.params)
    prepare = (params.get("prepare") or {}).get(task)
    if prepare is None:
        raise KeyError(f"params has no prepare.{task}: the reader settings that say how to tokenise raw text")
    evaluate = effective_params(params, task).get("evaluate") or {}
    root = project_root(args.params)
    vocab = Path(args.vocab) if args.vocab else root / "data" / "vocab" / task
    subword = root / "data" / "shards" / task / "subword.model"
    config = ServingConfig.from_params(
        task, mechanism, prepare, evaluate, device=args.device, pretokenized=args.pretokenized
    )
    return local_model(ckpt, vocab, config, subword if prepare.get("subword") else None)


def registered_model(uri: str):
    import mlflow

    from pipeline.tracking.runs import tracking_uri

    mlflow.set_tracking_uri(tracking_uri())
    mlflow.set_registry_uri(tracking_uri())
    return mlflow.pyfunc.load_model(uri)


def marked(tokens: list[str], copied: list[str], output: str) -> str:
    """The output with every copied token in brackets (tokens re-joined as the output was)."""
    if not copied:
        return output
    joiner = "" if len(tokens) > 1 and output == "".join(tokens) else " "  # LCSTS outputs have no spaces
    copied_set = set(copied)
    return joiner.join(f"[{t}]" if t in copied_set else t for t in tokens)


def format_rows(frame: pd.DataFrame, show_copies: bool) -> list[str]:
    lines = []
    for output, copied, tokens in zip(frame["output"], frame["copied"], frame["tokens"]):
        copied, tokens = list(copied), list(tokens)
        lines.append(f"{marked(tokens, copied, output)}\t{' '.join(copied)}" if show_copies else output)
    return lines


def run(args: argparse.Namespace, inp: TextIO, out: TextIO) -> int:
    model = checkpoint_model(args) if args.checkpoint else registered_model(args.model)
    texts = [line.rstrip("\r\n") for line in inp]
    if not texts:
        return 0
    params = {k: v for k, v in (("beam_size", args.beam), ("max_len", args.max_len)) if v is not None}
    frame = model.predict(pd.DataFrame({"text": texts}), params=params or None)
    for line in format_rows(frame, args.show_copies):
        out.write(line.replace("\n", " ") + "\n")
    return len(texts)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    inp = sys.stdin if args.input == "-" else open(args.input, encoding="utf-8")
    try:
        if args.output == "-":
            run(args, inp, sys.stdout)
        else:
            from pipeline.shards import atomic_path

            with atomic_path(Path(args.output)) as tmp, open(tmp, "w", encoding="utf-8") as out:
                run(args, inp, out)
    finally:
        if inp is not sys.stdin:
            inp.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
