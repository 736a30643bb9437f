"""Published numbers the comparison tables print beside ours (copied from the papers' tables)."""
from __future__ import annotations

# CopyNet (Gu et al. 2016), Table 1: top-1 exact-match accuracy (%) on the synthetic rule data.
COPYNET_TABLE1 = {
    "columns": ["x->0", "x->x", "x->xx", "xy->x", "xy->xy"],
    "rows": {
        "encdec": [100.0, 3.3, 1.5, 2.9, 0.0],
        "rnnsearch": [99.0, 69.4, 22.3, 40.7, 2.6],
        "copynet": [97.3, 93.7, 98.3, 68.2, 77.5],
    },
    "source": "Gu et al. 2016, Table 1 (test accuracy, beam 10, 200 rules x 200 instances)",
}
