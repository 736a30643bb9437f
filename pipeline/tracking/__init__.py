"""MLflow tracking: the names runs and models are kept under (``settings``), runs and their provenance
(``runs``), the task's splits as the runs' dataset inputs (``datasets``), the hand-off from the
train stage to the evaluate stage (``handoff``: ``run.json``), and the model registry with its
``champion`` alias (``registry``). With ``pipeline.serving.pyfunc`` and ``pipeline.serving.predict``
the only place ``mlflow`` is imported. It may import ``pipeline.config`` and ``pipeline.io``."""
