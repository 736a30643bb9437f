"""The MLflow model registry: one registered model per task, its best version under the alias ``champion``.

Conventions (read by ``flows/evaluate.py``, ``flows/compare.py`` and ``pipeline/retrain/``):

* registered model name: ``<prefix><task>`` (:func:`model_name`; prefix ``""`` by default, so
  ``models:/copy_rules@champion``);
* a version carries its evaluation metrics as tags ``metric.<split>.<key>`` (:func:`metric_tags`,
  e.g. ``metric.test.top1 = "76.9"``; the same numbers as ``metrics.json``, written once per
  version at registration), plus ``task``, ``mechanism``, ``run_id`` and whatever the caller adds
  (git commit, pipeline key);
* the alias ``champion`` points at the chosen version; :func:`set_champion` also tags that version
  ``champion_reason`` / ``champion_since`` and appends ``{version, previous, reason, time}`` to the
  registered model's tag ``champion_history`` (JSON list, the last ``HISTORY_KEEP`` entries), and
  writes the current reason into the registered model's description.

Every function takes the task name and an optional ``prefix`` and talks to the tracking URI of
:func:`pipeline.tracking.runs.tracking_uri` (``MLFLOW_TRACKING_URI`` or the repository's SQLite file).
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

from pipeline.io.files import sha256_tree
from pipeline.tracking.runs import metric_name, tracking_uri

# models:/<name>@<alias> or models:/<name>/<version>: a registered model's URI
REGISTERED_URI = re.compile(r"models:/(?P<name>[^/@]+)(?:@(?P<alias>[^/]+)|/(?P<version>\d+))$")

ALIAS = "champion"
METRIC_TAG = "metric"
HISTORY_TAG = "champion_history"
HISTORY_KEEP = 20
TAG_VALUE_LIMIT = 5000  # stay under every backend's tag value limit


def _client():
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri(), registry_uri=tracking_uri())


def model_name(task: str, prefix: str = "") -> str:
    """The registered model of ``task``: ``<prefix><task>``."""
    return f"{prefix}{task}"


def metric_tag(split: str, key: str) -> str:
    """The version tag holding metric ``key`` of ``split``: ``metric.<split>.<key>``."""
    return f"{METRIC_TAG}.{metric_name(split)}.{metric_name(key)}"


def metric_tags(metrics: dict) -> dict[str, str]:
    """``{split: {key: number, ...}}`` (metrics.json) -> ``{"metric.<split>.<key>": "<number>"}``.

    Only each split's own numbers: per-group breakdowns (``groups``), a metric's name and lists
    stay in metrics.json and the run; a top-level number becomes ``metric.<key>``."""

    def number(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    tags = {}
    for split, values in metrics.items():
        if number(values):
            tags[f"{METRIC_TAG}.{metric_name(split)}"] = repr(float(values))
        elif isinstance(values, dict):
            tags.update({metric_tag(split, k): repr(float(v)) for k, v in values.items() if number(v)})
    return tags


FILE_TAG = "sha256"  # version tags sha256.<artifact file name>: the model files as registered


def file_tags(files: dict[str, str]) -> dict[str, str]:
    """``{artifact file name: sha256}`` -> the version tags that record them."""
    return {f"{FILE_TAG}.{name}": digest for name, digest in files.items()}


def stored_file_hashes(model_uri: str) -> dict[str, str]:
    """sha256 of the model files as they are in the store (the files its serving.json lists, e.g.
    model.pt and the vocabularies), after checking they are the files that were logged."""
    import tempfile

    import mlflow

    with tempfile.TemporaryDirectory(prefix="register-") as tmp:
        root = Path(mlflow.artifacts.download_artifacts(artifact_uri=model_uri, dst_path=tmp))
        configs = sorted(root.rglob("serving.json"))
        if len(configs) != 1:
            return {}
        logged = json.loads(configs[0].read_text(encoding="utf-8")).get("files", {})
        stored = {}
        for file_name, digest in logged.items():
            found = sorted(root.rglob(file_name))
            stored[file_name] = sha256_tree(found[0]) if len(found) == 1 else "missing"  # a file or a directory
            if stored[file_name] != digest:
                raise TamperedModel(f"{model_uri}: {file_name} in the store is not the file that was logged")
        return stored


def register(model_uri: str, task: str, tags: dict | None = None, prefix: str = "") -> str:
    """Register ``model_uri`` (from :func:`pipeline.serving.pyfunc.log_pyfunc_model`) as a new version of
    the task's model (created when missing), with ``tags`` on the version and the sha256 of its files
    (``sha256.<file>``, checked again by :func:`verify_version` before the version is promoted);
    returns the version."""
    import mlflow

    mlflow.set_tracking_uri(tracking_uri())
    mlflow.set_registry_uri(tracking_uri())
    files = stored_file_hashes(model_uri)
    str_tags = {str(k): str(v) for k, v in {**(tags or {}), **file_tags(files)}.items()}
    mv = mlflow.register_model(model_uri, model_name(task, prefix), tags={"task": task, **str_tags})
    return str(mv.version)


def champion(task: str, prefix: str = ""):
    """The ``ModelVersion`` under the alias ``champion``, or None (no model or no alias yet)."""
    from mlflow.exceptions import MlflowException

    try:
        return _client().get_model_version_by_alias(model_name(task, prefix), ALIAS)
    except MlflowException:
        return None


def set_champion(task: str, version: str | int, reason: str, prefix: str = "") -> None:
    """Point ``champion`` at ``version`` and record why (version tags, the registered model's
    ``champion_history`` tag and description). Setting the version that already holds the alias
    records the reason again (a confirmation), it does not fail."""
    client, name, version = _client(), model_name(task, prefix), str(version)
    verify_version(name, version)  # fails clearly when the version does not exist or its files changed
    previous = champion(task, prefix)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    client.set_registered_model_alias(name, ALIAS, version)
    client.set_model_version_tag(name, version, "champion_reason", reason[:TAG_VALUE_LIMIT])
    client.set_model_version_tag(name, version, "champion_since", now)
    history = champion_history(task, prefix)
    history.append(
        {"version": version, "previous": str(previous.version) if previous else None, "reason": reason, "time": now}
    )
    history = history[-HISTORY_KEEP:]
    text = json.dumps(history, ensure_ascii=False)
    while len(text) > TAG_VALUE_LIMIT and len(history) > 1:  # drop the oldest until it fits
        history = history[1:]
        text = json.dumps(history, ensure_ascii=False)
    client.set_registered_model_tag(name, HISTORY_TAG, text[:TAG_VALUE_LIMIT])
    client.update_registered_model(name, description=f"champion: version {version} since {now}: {reason}")


def champion_history(task: str, prefix: str = "") -> list[dict]:
    """The recorded alias moves, oldest first (empty when none or no such model)."""
    from mlflow.exceptions import MlflowException

    try:
        tags = _client().get_registered_model(model_name(task, prefix)).tags
    except MlflowException:
        return []
    return json.loads(tags.get(HISTORY_TAG, "[]"))


def version_metric(version, metric_key: str) -> float | None:
    """The value of ``metric_key`` (``split.key`` or a full ``metric.split.key`` tag) on a
    ``ModelVersion``; None when it has no such tag or the value is not a finite number."""
    tag = metric_key if metric_key.startswith(f"{METRIC_TAG}.") else f"{METRIC_TAG}.{metric_name(metric_key)}"
    raw = (version.tags or {}).get(tag)
    try:
        value = float(raw) if raw is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def best_version(
    task: str, metric_key: str, higher_is_better: bool = True, prefix: str = "", where: dict[str, str] | None = None
) -> str | None:
    """The registered version with the best ``metric_key`` tag (``"test.top1"`` or
    ``"metric.test.top1"``) among those whose tags equal ``where`` (e.g. the same test data:
    ``{"data.test.content_sha256": ...}``, so only comparable numbers compete); versions without
    the metric are skipped; None when none has it. Ties go to the current champion, then to the
    newest version."""
    client, name = _client(), model_name(task, prefix)
    versions = [
        v
        for v in client.search_model_versions(f"name='{name}'")
        if all((v.tags or {}).get(k) == str(val) for k, val in (where or {}).items())
    ]
    scored = [(v, version_metric(v, metric_key)) for v in versions]
    scored = [(v, s) for v, s in scored if s is not None]
    if not scored:
        return None
    current = champion(task, prefix)
    current_version = str(current.version) if current else None
    sign = 1.0 if higher_is_better else -1.0
    best = max(scored, key=lambda vs: (sign * vs[1], str(vs[0].version) == current_version, int(vs[0].version)))
    return str(best[0].version)


def promote_best(
    task: str, metric_key: str, higher_is_better: bool = True, prefix: str = "", where: dict[str, str] | None = None
) -> str | None:
    """Move ``champion`` to :func:`best_version` when it is not there yet, with a reason naming
    both versions' values; returns the champion's version afterwards (None: nothing to rank)."""
    best = best_version(task, metric_key, higher_is_better, prefix, where)
    if best is None:
        return None
    current = champion(task, prefix)
    if current is not None and str(current.version) == best:
        return best
    chosen = _client().get_model_version(model_name(task, prefix), best)
    value = version_metric(chosen, metric_key)
    was = (
        "no champion before"
        if current is None
        else f"was version {current.version} ({version_metric(current, metric_key)})"
    )
    order = "higher" if higher_is_better else "lower"
    set_champion(task, best, f"best {metric_key} ({order} is better): version {best} ({value}); {was}", prefix)
    return best


def version_tags(name: str, version: str | int) -> dict[str, str]:
    """The tags of registered model ``name`` version ``version`` (mechanism, metrics, data hashes)."""
    return dict(_client().get_model_version(name, str(version)).tags)


def download_version(name: str, version: str | int, dst: Path) -> Path:
    """Download every artifact of registered model ``name`` version ``version`` under ``dst``."""
    import mlflow

    mlflow.set_tracking_uri(tracking_uri())
    mlflow.set_registry_uri(tracking_uri())
    return Path(mlflow.artifacts.download_artifacts(artifact_uri=f"models:/{name}/{version}", dst_path=str(dst)))


class TamperedModel(RuntimeError):
    """A registered version's files are not the files it was registered with."""


def verify_version(name: str, version: str | int) -> None:
    """Download version ``version`` of ``name`` and check every file recorded at registration
    (``sha256.<file>`` tags) has the same sha256 now; TamperedModel naming the file otherwise."""
    import tempfile

    mv = _client().get_model_version(name, str(version))
    expected = {k[len(FILE_TAG) + 1 :]: v for k, v in (mv.tags or {}).items() if k.startswith(f"{FILE_TAG}.")}
    if not expected:
        raise TamperedModel(
            f"{name} version {version} records no file hashes (registered before they were kept); "
            "re-register it before promoting it"
        )
    with tempfile.TemporaryDirectory(prefix="verify-") as tmp:
        root = download_version(name, version, Path(tmp))
        for file_name, digest in expected.items():
            found = sorted(root.rglob(file_name))
            if len(found) != 1:
                raise TamperedModel(
                    f"{name} version {version}: expected one {file_name} in its artifacts, found {len(found)}"
                )
            actual = sha256_tree(found[0])  # a file or a directory (a backbone tokenizer)
            if actual != digest:
                raise TamperedModel(
                    f"{name} version {version}: {file_name} has sha256 {actual[:16]}..., registered with {digest[:16]}...; "
                    "the stored model was changed after registration"
                )


def serving_problem(uri: str, name: str, alias: str) -> str | None:
    """Why the registry at ``uri`` has no model ``name`` at ``alias`` (an alias, or a version number) for
    ``copyseq serve``, naming what it holds; None when it has one. A store that cannot be read is a problem too."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    if uri.lower().startswith(("http://", "https://")) and (down := _server_problem(uri)):
        return f"the model registry at {uri} cannot be read: {down}"
    try:
        return _registry_problem(MlflowClient(tracking_uri=uri, registry_uri=uri), name, alias)
    except (MlflowException, SQLAlchemyError) as err:  # not a database, another MLflow's schema, ...
        reason = err.message if isinstance(err, MlflowException) else str(err).splitlines()[0]
        return f"the model registry at {uri} cannot be read: {reason}"


def _server_problem(uri: str, timeout_s: float = 10.0) -> str | None:
    """Why no MLflow server answers at ``uri`` (its ``/health``), or None. Asked once, with a timeout:
    MLflow's own client retries a server that does not answer with backoff for minutes."""
    import requests  # MLflow's own HTTP client

    health = uri.rstrip("/") + "/health"
    try:
        response = requests.get(health, timeout=timeout_s)
    except (requests.RequestException, ValueError) as err:  # refused, timed out, not a URL
        return f"no MLflow server answers there ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
    return None if response.status_code == 200 else f"GET {health} answered HTTP {response.status_code}"


def _registry_problem(client, name: str, alias: str) -> str | None:
    """Why ``name`` at ``alias`` (an alias, or a version number) is not in the registry, naming what is; None if it is."""
    from mlflow.exceptions import MlflowException

    try:
        model = client.get_registered_model(name)
    except MlflowException as err:
        if err.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        known = sorted(m.name for m in client.search_registered_models())
        return f"no registered model {name!r} (registered: {', '.join(known) or 'none yet: run the pipeline first'})"
    versions = sorted(int(v.version) for v in client.search_model_versions(f"name='{name}'"))
    shown = [str(v) for v in versions] if len(versions) <= 10 else ["...", *map(str, versions[-10:])]
    aliases = ", ".join(f"{a} -> {v}" for a, v in sorted(model.aliases.items())) or "none"
    has = f"versions: {', '.join(shown) or 'none'}; aliases: {aliases}"
    if alias.isdigit():
        return None if int(alias) in versions else f"{name} has no version {alias} ({has})"
    return None if alias in model.aliases else f"{name} has no alias {alias!r} ({has})"
