"""Training: the ``train`` settings (``settings``), the loop with token-budget batches, validation,
early stopping and step checkpoints that resume exactly (``loop``), learning-rate schedules
(``schedule``), several processes under torchrun + DDP (``distributed``), the model files and their
checks (``checkpoints``), and one job (task, mechanism) -> checkpoint directory (``job``; the
train stage runs it in-process or on every process of a torchrun job). It may import ``pipeline.config``,
``pipeline.runtime``, ``pipeline.io``, ``pipeline.vocab`` and ``models``; no Prefect, no MLflow
(callers log through ``on_step``/``on_validate``)."""
