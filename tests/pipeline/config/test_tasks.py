"""pipeline.config.tasks: per-task settings and presets over the shared sections; enabling tasks by data."""

from __future__ import annotations

import pytest
import yaml

from pipeline.config.tasks import deep_merge, effective_params, selection_metric
from pipeline.data.tasks import main, task_status
from pipeline.training.settings import TrainConfig
from tests.helpers import REPO


def test_deep_merge_overrides_nested_keys_only():
    base = {"a": 1, "m": {"emb": 64, "hidden": 128, "ps": {"shortlist": 250, "temperature": 1.0}}}
    out = deep_merge(base, {"m": {"hidden": 256, "ps": {"shortlist": None}}}, {"m": {"emb": 100}})
    assert out == {"a": 1, "m": {"emb": 100, "hidden": 256, "ps": {"shortlist": None, "temperature": 1.0}}}
    assert base["m"]["hidden"] == 128 and base["m"]["ps"]["shortlist"] == 250  # the input is untouched


def test_effective_params_applies_task_then_preset():
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["preset"] = "cpu"
    eff = effective_params(params, "lcsts_char")
    assert eff["evaluate"]["metric"] == "rouge_f_chars"  # task override
    assert eff["vocab"]["tgt_max_size"] == 1000  # cpu preset
    assert eff["model"]["pointer_softmax"]["shortlist"] is None  # task override of a nested key
    assert eff["model"]["pointer_softmax"]["temperature"] == params["model"]["pointer_softmax"]["temperature"]
    assert eff["train"]["lr"] == params["train"]["lr"]  # untouched shared value
    params["preset"] = "paper"
    assert effective_params(params, "lcsts_char")["vocab"].get("tgt_max_size") != 1000
    # copy_rules has no presets: the shared sections plus its own evaluate/compare settings
    eff = effective_params(params, "copy_rules")
    assert eff["model"] == params["model"] and eff["evaluate"]["group_by"] == "rule_type"


def test_a_mechanism_override_applies_to_that_mechanism_only_and_last():
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["preset"] = "cpu"
    settings = params["task_settings"]["gigaword"]
    settings["mechanisms"] = {"copynet": {"train": {"epochs": 20, "lr": 0.01}}}
    settings["presets"]["cpu"]["mechanisms"] = {"copynet": {"train": {"lr": 0.02}}}
    task = effective_params(params, "gigaword")
    own = effective_params(params, "gigaword", "copynet")
    other = effective_params(params, "gigaword", "rnnsearch")
    assert task["train"]["epochs"] == 6 and other["train"] == task["train"]  # the cpu preset's 6 epochs
    assert own["train"]["epochs"] == 20  # the mechanism's override wins over the task's preset
    assert own["train"]["lr"] == 0.02  # ... and the preset's own mechanism override over the task's
    assert own["model"] == task["model"] and own["vocab"] == task["vocab"]
    settings["mechanisms"]["copynet"]["vocab"] = {"min_count": 2}  # vocabularies are per task
    with pytest.raises(KeyError, match=r"mechanisms.copynet has unknown sections \['vocab'\]"):
        effective_params(params, "gigaword", "copynet")


def test_unknown_preset_and_section_are_errors():
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["preset"] = "gpu"
    with pytest.raises(KeyError, match="no preset 'gpu'"):
        effective_params(params, "gigaword")
    params["preset"] = "cpu"
    params["task_settings"]["gigaword"]["presets"]["cpu"]["modle"] = {}
    with pytest.raises(KeyError, match="unknown sections"):
        effective_params(params, "gigaword")


def test_selection_metric():
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    assert selection_metric(params, "copy_rules") == ("valid", "top1", True)
    assert selection_metric(params, "ewsew") == ("valid", "bleu", True)
    for task in params["task_settings"]:  # every task chooses on its validation split
        assert selection_metric(params, task)[0] == "valid"


@pytest.mark.parametrize("spec", ["test.top1", "test_unseen.top1", "duc2004.rouge2", "valid2.top1"])
def test_selection_metric_refuses_other_splits(spec):
    params = {"task_settings": {"t": {"champion": spec}}}
    with pytest.raises(ValueError, match=r"task_settings.t.champion is .*validation split only"):
        selection_metric(params, "t")


def test_selection_metric_forms():
    for spec, key in (("valid.top1", "top1"), ("rouge2", "rouge2"), ("valid.x->xx.top1", "x->xx.top1")):
        assert selection_metric({"task_settings": {"t": {"champion": spec}}}, "t") == ("valid", key, True)
    assert selection_metric({"task_settings": {"t": {}}}, "t") == ("valid", "top1", True)


def _project(tmp_path, data: bool):
    """A params.yaml whose lcsts_char raw input is tmp_path/raw (files present or not)."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    raw = tmp_path / "raw"
    settings = params["prepare"]["lcsts_char"]
    if data:
        for key in ("train_file", "valid_file", "test_file"):
            (raw / settings[key]).parent.mkdir(parents=True, exist_ok=True)
            (raw / settings[key]).write_text("x\n")
    params["task_settings"]["lcsts_char"]["raw"] = str(raw)
    text = (REPO / "params.yaml").read_text()
    # keep the file's own text (comments, layout) and swap in the edited task_settings below it
    head = text[: text.index("task_settings:")]
    (tmp_path / "params.yaml").write_text(
        head + yaml.safe_dump({"task_settings": params["task_settings"]}, sort_keys=False)
    )
    return tmp_path / "params.yaml"


def test_status_names_the_missing_file(tmp_path):
    path = _project(tmp_path, data=False)
    params = yaml.safe_load(path.read_text())
    status = task_status(params, "lcsts_char", tmp_path)
    assert status.startswith("data absent") and str(tmp_path / "raw") in status
    assert task_status(params, "wikismall", tmp_path).startswith(("no training split", "data absent"))


def test_enable_available_rewrites_only_the_tasks_block(tmp_path, capsys):
    path = _project(tmp_path, data=True)
    before = path.read_text()
    assert main(["--params", str(path), "enable", "lcsts_char", "--preset", "paper"]) == 0
    after = yaml.safe_load(path.read_text())
    assert after["tasks"] == {"lcsts_char": str(tmp_path / "raw")}
    assert after["preset"] == "paper"
    old = yaml.safe_load(before)
    assert {k: v for k, v in after.items() if k not in ("tasks", "preset")} == {
        k: v for k, v in old.items() if k not in ("tasks", "preset")
    }
    text = path.read_text()
    assert "# copy_rules: pipeline/data/corpora/copynet_rules.py" in text  # the others stay as comments
    assert "mechanisms:" in text and text.count("\ntasks:") == 1
    # a task whose data is absent cannot be enabled by name
    (tmp_path / "raw" / "lcsts_clge_subset" / "train.tsv").unlink()
    with pytest.raises(SystemExit):
        main(["--params", str(path), "enable", "lcsts_char"])
    assert "cannot enable" in capsys.readouterr().err


def test_enable_says_which_tasks_it_switched_off_and_how_to_switch_them_on(tmp_path, capsys):
    """A task that was enabled and still has its data is 'switched off', with the command that
    enables it again, never 'skipped ...: ready'; the others say why they cannot run."""
    path = _project(tmp_path, data=True)
    (tmp_path / "pipeline/data/corpora").mkdir(parents=True)
    (tmp_path / "pipeline/data/corpora/copynet_rules.py").write_text("")  # copy_rules's raw input: ready here
    assert main(["--params", str(path), "enable", "lcsts_char"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "enabled: lcsts_char"
    assert lines[1] == (
        "  copy_rules: switched off (its data is here: enable it again with "
        "`python -m pipeline.data.tasks enable lcsts_char copy_rules`)"
    )
    rarest = next(line for line in lines if line.startswith("  rarest_word:"))
    assert (
        rarest
        == f"  rarest_word: not enabled, cannot run here: data absent: {tmp_path / 'pipeline/data/corpora/rarest_word.py'}"
    )
    assert not any("skipped" in line or line.endswith(": ready") for line in lines)
    # and back: lcsts_char switched off in turn, copy_rules enabled
    assert main(["--params", str(path), "enable", "copy_rules"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [
        "enabled: copy_rules",
        "  lcsts_char: switched off (its data is here: enable it again with "
        "`python -m pipeline.data.tasks enable copy_rules lcsts_char`)",
    ]


def test_lr_halves_after_the_given_epoch():
    schedule = TrainConfig(lr=2.0, optimizer="sgd", lr_halve_after=5).schedule()
    assert [schedule.at(step=100, epoch=e) for e in range(1, 9)] == [2.0] * 5 + [1.0, 0.5, 0.25]
    assert TrainConfig(lr=0.1).schedule().at(step=10_000, epoch=50) == 0.1
    with pytest.raises(ValueError, match="optimizer"):
        TrainConfig(optimizer="adagrad")


def test_every_task_and_preset_builds_valid_configs():
    """A typo in any task's settings or preset (an unknown key, a bad value) fails here, not mid-run."""
    from models.registry import MECHANISMS, model_config
    from pipeline.config.variants import resolve
    from pipeline.decoding.settings import EvalConfig

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    for preset in ("paper", "cpu"):
        params["preset"] = preset
        for task in params["task_settings"]:
            eff = effective_params(params, task)
            for mech in params["mechanisms"]:  # a variant: its base under its settings
                base = resolve(params, mech, known=MECHANISMS).mechanism
                model_config(effective_params(params, task, mech)["model"], base, src_vocab=10, tgt_vocab=10)
            TrainConfig.from_dict(eff["train"])
            EvalConfig.from_dict({k: v for k, v in eff["evaluate"].items() if k != "heatmap"})
            assert set(eff["vocab"]) <= {"src_max_size", "tgt_max_size", "min_count"}, (task, preset)


def test_a_mechanism_section_overrides_shared_sizes_for_that_mechanism_only():
    from models.registry import model_config

    model = {"emb": 64, "hidden": 128, "wean": {"emb": 512, "hidden": 512, "layers": 1}}
    wean = model_config(model, "wean", src_vocab=10, tgt_vocab=10)
    copynet = model_config(model, "copynet", src_vocab=10, tgt_vocab=10)
    assert (wean.emb, wean.hidden, wean.options) == (512, 512, {"layers": 1})
    assert (copynet.emb, copynet.hidden, copynet.options) == (64, 128, {})
