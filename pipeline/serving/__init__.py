"""Serving a trained model on raw text: :class:`~pipeline.serving.predictor.Predictor` (raw text ->
the reader's tokens -> beam search -> text, within the serving limits; no MLflow in it), its MLflow
pyfunc wrapper that ``mlflow models serve`` loads (``pyfunc``), and the ``predict`` command
(``python -m pipeline.serving.predict``, ``copyseq-predict``). It may import ``pipeline.config``,
``pipeline.runtime``, ``pipeline.io``, ``pipeline.data`` (the readers' tokenizers), ``pipeline.vocab``,
``pipeline.training`` (loading a checkpoint), ``pipeline.decoding`` and, for ``predict``'s registered
models, ``pipeline.tracking``; MLflow in ``pyfunc`` and ``predict`` only. A logged model carries these packages as its code (``pyfunc.SERVED_PACKAGES``)."""
