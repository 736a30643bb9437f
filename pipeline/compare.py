"""Comparison tables in the shape of the papers' tables: rows are mechanisms, ours and published."""
from __future__ import annotations

from pipeline.paper_results import COPYNET_TABLE1

PAPER_TABLES = {"copynet_table1": COPYNET_TABLE1}


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def accuracy_rows(metrics: dict[str, dict], split: str, columns: list[str], key: str) -> dict[str, dict]:
    """{mechanism: {column: value}} from each mechanism's metrics.json (groups = rule types)."""
    rows = {}
    for mech, m in metrics.items():
        split_m = m.get(split)
        if not split_m:
            continue
        groups = split_m.get("groups", {})
        rows[mech] = {c: groups[c][key] for c in columns if c in groups}
        rows[mech]["all"] = split_m[key]
    return rows


def markdown_table(rows: dict[str, dict], columns: list[str], display: dict[str, str],
                   paper: dict | None = None) -> str:
    cols = columns + ["all"]
    lines = ["| model | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for mech, values in rows.items():
        lines.append(f"| {display.get(mech, mech)} (ours) | " + " | ".join(_fmt(values.get(c)) for c in cols) + " |")
    if paper:
        for mech, values in paper["rows"].items():
            if mech in rows or not rows:
                named = dict(zip(paper["columns"], values))
                lines.append(f"| {display.get(mech, mech)} (paper) | "
                             + " | ".join(_fmt(named.get(c)) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def comparison_markdown(task: str, metrics: dict[str, dict], splits: list[str], columns: list[str],
                        display: dict[str, str], topk: int, paper: dict | None) -> str:
    """The whole comparison page for one task: top-1 and top-k per split, paper rows beside ours."""
    out = [f"# {task}: exact-match accuracy (%)\n"]
    if paper:
        out.append(f"Paper rows: {paper['source']}; they were trained at paper scale, ours at the scale in "
                   "params.yaml.\n")
    for split in splits:
        for key in ("top1", f"top{topk}"):
            rows = accuracy_rows(metrics, split, columns, key)
            if not rows:
                continue
            out.append(f"\n## {split}, {key}\n\n")
            out.append(markdown_table(rows, columns, display, paper if key == "top1" and split == "test" else None))
    return "".join(out)
