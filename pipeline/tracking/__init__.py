"""Everything that talks to MLflow, in one place: runs and provenance (``runs``), the model registry
and the ``champion`` alias (``registry``), the pyfunc model served by ``mlflow models serve``
(``serving``) and the ``predict`` command (``predict``). The rest of ``pipeline`` has no MLflow in it.
"""
