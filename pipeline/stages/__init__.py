"""The DVC stages as library calls: one module per stage that joins several roles (``vocab``,
``train``, ``evaluate``, ``compare``), each a ``run(...)`` that ``flows/<stage>.py`` wraps in Prefect,
passing ``step`` to make its units of work Prefect tasks (the prepare stage's job is
:mod:`pipeline.data.prepare`; ``train_node`` is the part of a train stage that runs on the other
machines of a training on several). The top of the library: it may import every role package (but not
``pipeline.retrain``); no Prefect, and MLflow only through ``pipeline.tracking`` and
``pipeline.serving.pyfunc``."""
