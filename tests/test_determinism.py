"""The same params give the same metrics: a tiny task trained and evaluated twice, each time in a
fresh process with the default run's compute settings (fixed thread count, deterministic kernels,
pinned math libraries), ends with identical metrics, beam scores, learning curves and weights.
(tests/test_math_pins.py runs the same script in processes that see another machine.)"""

from __future__ import annotations

from tests.test_math_pins import _run


def test_same_params_give_identical_metrics_in_fresh_processes(tmp_path):
    first = _run(tmp_path, "a", True, {}, one_core=False)
    second = _run(tmp_path, "b", True, {}, one_core=False)
    for mechanism in ("copynet", "wean"):
        a, b = first[mechanism], second[mechanism]
        assert a["weights"] == b["weights"], mechanism
        assert a["metrics"] == b["metrics"], mechanism  # exact, not approximately
        assert a["scores"] == b["scores"] and a["valid_loss"] == b["valid_loss"], mechanism
        assert a["metrics"]["n"] > 0 and a["valid_loss"][-1] < a["valid_loss"][0]
