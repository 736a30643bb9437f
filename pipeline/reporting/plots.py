"""PNG figures (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pipeline.io.files import atomic_path  # noqa: E402


def _save(fig, path: Path) -> None:
    """Save atomically: a temp file in the same directory, then rename."""
    try:
        with atomic_path(path, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=110, bbox_inches="tight")
    finally:
        plt.close(fig)


def copy_heatmap(trace: dict, path: Path, title: str) -> None:
    """CopyNet Figure 3: input positions (x) by output steps (y), colour = weight."""
    weights = trace["weights"]
    if weights is None:  # Enc-Dec reads one fixed code: there is no per-position weight to show
        fig, ax = plt.subplots(figsize=(6, 1.6))
        ax.axis("off")
        ax.text(
            0.0,
            0.5,
            f"{title}\nno per-position weights (the model reads a fixed-length code)\n"
            f"output: {' '.join(trace['out'])[:90]}",
            fontsize=8,
            va="center",
        )
        _save(fig, path)
        return
    fig, ax = plt.subplots(figsize=(max(4, 0.32 * len(trace["src"]) + 2), max(3, 0.3 * len(weights) + 1.5)))
    im = ax.imshow(weights, aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0)
    ax.set_xticks(range(len(trace["src"])), trace["src"], rotation=90, fontsize=7)
    ax.set_yticks(range(len(trace["out"])), trace["out"], fontsize=7)
    ax.set_xlabel("input sequence")
    ax.set_ylabel("decoded output")
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, label=trace["kind"])
    _save(fig, path)


def grouped_bars(rows: dict[str, dict[str, float]], columns: list[str], path: Path, title: str, ylabel: str) -> None:
    """One group of bars per column, one bar per row (e.g. mechanisms x rule types)."""
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(columns)), 3.8))
    width = 0.8 / max(len(rows), 1)
    for i, (name, values) in enumerate(rows.items()):
        xs = [j + i * width for j in range(len(columns))]
        hatch = "//" if name.endswith("(paper)") else None
        ax.bar(xs, [values.get(c, 0.0) for c in columns], width, label=name, hatch=hatch)
    ax.set_xticks([j + width * (len(rows) - 1) / 2 for j in range(len(columns))], columns)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 105)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    _save(fig, path)
