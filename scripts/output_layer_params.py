"""Output-layer parameters of every mechanism at the paper sizes, shaped like WEAN's Table 5.

    .venv/bin/python scripts/output_layer_params.py            # Markdown to stdout
    .venv/bin/python scripts/output_layer_params.py --params params.yaml

Sizes (WEAN 3.1.3 / 3.2.3 / 4.1): PWKP and EW-SEW vocabulary 50,000 with hidden = embedding = 256;
LCSTS vocabulary 4,000 with hidden = embedding = 512. Each mechanism uses its `model.<name>`
options from params.yaml. Models are built on the meta device (no memory). The paper's rows are
printed below ours, marked as such.
"""

from __future__ import annotations

import argparse

from models.param_count import output_layer_table, paper_table5  # noqa: E402
from models.registry import DISPLAY_NAMES, MECHANISMS  # noqa: E402
from pipeline.config.params import load_params  # noqa: E402

SIZES = {"PWKP / EW-SEW": (50_000, 256), "LCSTS": (4_000, 512)}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--params", default=None, help="params.yaml whose model.<mechanism> options to use")
    args = p.parse_args(argv)
    model_params = load_params(args.params).get("model", {})
    options = {name: model_params.get(name) or {} for name in MECHANISMS}
    # Table 5's WEAN figure is the concat score's ("at most"): add that variant beside ours.
    builders = {**MECHANISMS, "WEAN (concat score)": MECHANISMS["wean"]}
    options["WEAN (concat score)"] = {**options["wean"], "score": "concat"}
    print("| dataset | model | output layer | word generator (Table 5 convention) | whole model |")
    print("|---|---|---:|---:|---:|")
    for dataset, (vocab, dim) in SIZES.items():
        sizes = {"src_vocab": vocab, "tgt_vocab": vocab, "emb": dim, "hidden": dim}
        for row in output_layer_table(builders, sizes, options):
            print(
                f"| {dataset} | {DISPLAY_NAMES.get(row['mechanism'], row['mechanism'])} "
                f"| {row['output_layer']:,} | {row['word_generator']:,} | {row['total']:,} |"
            )
        for row in paper_table5():
            if row["dataset"] in dataset:
                print(
                    f"| {dataset} | {row['model']} (paper, {row['formula']}) | | {row['params']:,} "
                    f"({row['reported']}) | |"
                )


if __name__ == "__main__":
    main()
