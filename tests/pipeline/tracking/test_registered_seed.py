"""Which seed a row registers (pipeline.stages.evaluate.registered_seed): its best by the task's
champion metric on validation, the earliest on a tie, the first with one seed."""

from __future__ import annotations

from pipeline.stages.evaluate import registered_seed

PARAMS = {
    "train": {"seed": 7, "seeds": 3},
    "task_settings": {"rules": {"champion": "valid.top1"}, "news": {"champion": "valid.rouge2"}},
}


def seeded(split: str, figures: dict[str, dict]) -> dict:
    first = next(iter(figures.values()))
    return {split: {**first, "seeds": figures}, "test": {**first, "seeds": {s: {"top1": 0.0} for s in figures}}}


def test_the_best_validation_seed_is_registered() -> None:
    metrics = seeded("valid", {"7": {"top1": 50.0}, "8": {"top1": 62.5}, "9": {"top1": 60.0}})
    assert registered_seed(PARAMS, "rules", metrics) == "8"


def test_a_tie_keeps_the_earlier_seed_and_one_seed_is_the_first() -> None:
    assert registered_seed(PARAMS, "rules", seeded("valid", {"7": {"top1": 50.0}, "8": {"top1": 50.0}})) == "7"
    assert registered_seed(PARAMS, "rules", {"valid": {"top1": 10.0}, "test": {"top1": 99.0}}) == "7"


def test_the_task_s_own_metric_decides_never_the_test_figures() -> None:
    metrics = seeded("valid", {"7": {"top1": 90.0, "rouge2": 10.0}, "8": {"top1": 10.0, "rouge2": 20.0}})
    metrics["test"]["seeds"] = {"7": {"rouge2": 99.0, "top1": 99.0}, "8": {"rouge2": 0.0, "top1": 0.0}}
    assert registered_seed(PARAMS, "news", metrics) == "8"
    assert registered_seed(PARAMS, "rules", metrics) == "7"
