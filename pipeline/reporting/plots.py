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


def interval_dots(
    rows: dict[str, dict[str, float]],
    intervals: dict[str, dict[str, dict]],
    columns: list[str],
    path: Path,
    title: str,
    xlabel: str,
) -> None:
    """One panel per column, one line per row: our figure as a dot with its 95% interval as whiskers
    (blue: the column's best or not significantly different from it, grey: significantly worse), a
    published figure as a hollow diamond. Row labels on the left, the key under the panels: nothing
    covers a point or a whisker."""
    labels = list(rows)
    height = 0.34 * len(labels) + 1.4
    fig, axes = plt.subplots(
        1, len(columns), figsize=(2.3 * len(columns) + 3.2, height), sharex=True, sharey=True, squeeze=False
    )
    ys = list(range(len(labels)))[::-1]  # the first row at the top
    for ax, column in zip(axes[0], columns):
        for y, label in zip(ys, labels):
            value = rows[label].get(column)
            if value is None:
                continue
            cell = (intervals.get(label) or {}).get(column)
            if cell is None:  # a published figure
                ax.plot(value, y, marker="D", mfc="none", mec="C3", ms=5, ls="none")
                continue
            tied = cell["best"] or not cell["significant"]
            err = [[max(value - cell["low"], 0.0)], [max(cell["high"] - value, 0.0)]]
            ax.errorbar(value, y, xerr=err, fmt="o", ms=4, capsize=2, color="C0" if tied else "0.55")
        ax.set_title(column, fontsize=9)
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(axis="x", labelsize=7)
    axes[0][0].set_yticks(ys, labels, fontsize=7)
    axes[0][0].set_ylim(-0.7, len(labels) - 0.3)
    fig.suptitle(title, fontsize=10)
    fig.supxlabel(
        f"{xlabel}. Dots: ours with the 95% interval (blue: best or not significantly different from it; "
        "grey: significantly worse). Hollow diamonds: the paper's.",
        fontsize=7,
    )
    _save(fig, path)
