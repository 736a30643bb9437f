"""The promotion rule (:func:`decide`): promote iff there is no champion, or the challenger beats it by
strictly more than ``margin`` (a tie keeps the champion, NaN never wins), whatever the metric's
direction, with a one-line reason (``promoted: ...`` / ``kept champion: ...``); and the tags of the
version a promotion registers (:func:`promotion_tags`)."""

from __future__ import annotations

import math

from pipeline.retrain.settings import TAG, MetricSpec
from pipeline.tracking.registry import metric_tags


def decide(
    spec: MetricSpec, challenger: float, champion: float | None, margin: float, champion_version: str | None = None
) -> tuple[bool, str]:
    """Promote iff no champion, or gain(challenger, champion) > margin (strictly; NaN never wins)."""
    if champion is None:
        return True, f"no champion yet; challenger {spec.name} = {challenger:.4f}"
    gain = spec.gain(challenger, champion)
    verdict = (
        f"{spec.name}: challenger {challenger:.4f} vs champion v{champion_version} {champion:.4f}, "
        f"gain {gain:+.4f} ({'higher' if spec.higher_is_better else 'lower'} is better), margin {margin:g}"
    )
    if math.isnan(challenger) or not gain > margin:
        return False, f"kept champion: {verdict}"
    return True, f"promoted: {verdict}"


def promotion_tags(record: dict, spec: MetricSpec, challenger_metrics: dict) -> dict[str, str]:
    """The tags of the version a promotion registers, from the run's decision record (its reason,
    both values, the margin, the frozen test's and the training data's hashes) and the challenger's
    metrics on the frozen test split (``metric.<split>.<key>``)."""
    champion, challenger = record["champion"], record["challenger"]
    return {
        f"{TAG}reason": record["reason"],
        f"{TAG}run": record["run"],
        f"{TAG}metric": spec.name,
        f"{TAG}value": repr(challenger["value"]),
        f"{TAG}previous_champion": champion["version"] if champion else "none",
        f"{TAG}previous_value": repr(champion["value"] if champion else None),
        f"{TAG}margin": repr(record["margin"]),
        f"{TAG}frozen_test_sha256": record["frozen_test"]["content_sha256"],
        **{f"{TAG}data.{s}.content_sha256": h for s, h in challenger["data"].items()},
        "run_id": challenger["run_id"],
        **metric_tags({spec.split: challenger_metrics}),
    }
