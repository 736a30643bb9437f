"""Checkpoint averaging (fairseq's ``scripts/average_checkpoints.py``, OpenNMT-py's ``average_models.py``):
the element-wise mean of the weights of the last K checkpoints of a run.

With ``train.keep_checkpoints: K`` the training loop writes the weights at every validation to
``<checkpoint dir>/steps/step-<step>.pt`` (the same format as model.pt, so each one loads on its
own) and keeps the last K. ``evaluate.average_last: K`` scores (and registers) their average instead
of model.pt, the best validation's weights. By hand::

    python -m pipeline.training.averaging data/checkpoints/<task>/<mechanism> --last 5 -o averaged.pt

Floating-point tensors are summed in float64 and divided once, then cast back to their dtype, so the
mean does not depend on the order of the files beyond the last bit of float64. Integer tensors
(counters, index buffers) are not averaged: they must be equal in every checkpoint, else it is an error.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import torch

from pipeline.training.checkpoints import load_file, save_atomic

STEPS_DIR = "steps"
_NAME = re.compile(r"^step-(\d+)\.pt$")


def snapshot_path(ckpt_dir: Path, step: int) -> Path:
    return Path(ckpt_dir) / STEPS_DIR / f"step-{step:08d}.pt"


def snapshots(ckpt_dir: Path) -> list[Path]:
    """The kept step checkpoints of ``ckpt_dir``, oldest first."""
    folder = Path(ckpt_dir) / STEPS_DIR
    found = [(int(m.group(1)), p) for p in folder.glob("step-*.pt") if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def prune(ckpt_dir: Path, keep: int) -> None:
    """Delete all but the last ``keep`` step checkpoints (all of them when ``keep`` is 0)."""
    kept = snapshots(ckpt_dir)
    for path in kept[: max(len(kept) - keep, 0)]:
        path.unlink(missing_ok=True)


def average_state_dicts(states: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The element-wise mean of ``states`` (same keys and shapes); integer tensors must be equal."""
    if not states:
        raise ValueError("no checkpoints to average")
    keys = list(states[0])
    for i, state in enumerate(states[1:], 1):
        if list(state) != keys:
            raise ValueError(f"checkpoint {i} has other parameters than checkpoint 0: they are not of one model")
    averaged = {}
    for key in keys:
        tensors = [s[key] for s in states]
        if any(t.shape != tensors[0].shape for t in tensors):
            raise ValueError(f"{key}: shapes differ between the checkpoints {[tuple(t.shape) for t in tensors]}")
        if tensors[0].is_floating_point():
            total = torch.zeros_like(tensors[0], dtype=torch.float64)
            for t in tensors:
                total += t.double()
            averaged[key] = (total / len(tensors)).to(tensors[0].dtype)
        else:
            if any(not torch.equal(t, tensors[0]) for t in tensors):
                raise ValueError(f"{key}: a non-floating-point tensor that differs between the checkpoints")
            averaged[key] = tensors[0].clone()
    return averaged


def average_checkpoints(paths: list[Path]) -> dict:
    """A model.pt-style checkpoint whose weights are the mean of ``paths``' (the rest from the last
    file, plus ``averaged_steps``: the steps averaged)."""
    ckpts = [load_file(p) for p in paths]
    configs = {repr(c.get("model_config")) for c in ckpts}
    if len(configs) > 1:
        raise ValueError(f"{', '.join(map(str, paths))}: checkpoints of different model configs cannot be averaged")
    return {
        **ckpts[-1],
        "model": average_state_dicts([c["model"] for c in ckpts]),
        "averaged_steps": [c.get("step") for c in ckpts],
    }


def last_snapshots(ckpt_dir: Path, last: int) -> list[Path]:
    """The last ``last`` step checkpoints of ``ckpt_dir``; an error naming how many there are when fewer."""
    kept = snapshots(ckpt_dir)
    if last < 1:
        raise ValueError(f"average the last K >= 1 checkpoints, got {last}")
    if len(kept) < last:
        raise FileNotFoundError(
            f"{Path(ckpt_dir) / STEPS_DIR}: {len(kept)} step checkpoint(s), {last} asked for; "
            f"train with train.keep_checkpoints >= {last} (it keeps the weights of the last validations)"
        )
    return kept[-last:]


def write_average(ckpt_dir: Path, last: int, out: Path) -> Path:
    """Average the last ``last`` step checkpoints of ``ckpt_dir`` into ``out`` (written atomically)."""
    save_atomic(average_checkpoints(last_snapshots(ckpt_dir, last)), out)
    return Path(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.training.averaging", description="Average the last K step checkpoints of a run."
    )
    parser.add_argument("checkpoint_dir", type=Path, help="a training's checkpoint folder (holding steps/)")
    parser.add_argument("--last", type=int, required=True, help="how many of the last step checkpoints")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the averaged checkpoint to write")
    args = parser.parse_args(argv)
    try:
        out = write_average(args.checkpoint_dir, args.last, args.output)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
