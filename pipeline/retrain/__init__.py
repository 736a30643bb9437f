"""Champion/challenger retraining (the ``retrain`` Prefect deployment, ``flows/retrain.py``), without
Prefect: one run (:mod:`~pipeline.retrain.run`) refreshes the data, trains a challenger into its own
directory, scores it and the champion on the same frozen copy of the test split, and promotes the
challenger only when it beats the champion by more than a margin. Its parts: the settings and the
metric compared (``settings``), the promotion rule and the promoted version's tags (``decision``),
``dvc pull``/``dvc repro`` as bounded subprocesses (``commands``), what a task keeps under
``data/retrain/<task>/``: the frozen test copy, the decision log, the run lock (``state``), and the
steps that train, score, register and move the alias (``steps``). It sits on top: it may import
every role package but ``pipeline.stages``; MLflow only through ``pipeline.tracking`` and
``pipeline.serving.pyfunc``."""
