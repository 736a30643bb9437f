"""Configuration: ``params.yaml`` read and its sections merged per task (``params``, ``tasks``), where each
stage reads and writes under ``data/`` (``paths``), and the helpers that turn a section into a typed,
checked settings object (``validation``), and editing params.yaml as text with its comments kept
(``params_edit``). Stdlib and pyyaml only: it imports no other package of
``pipeline`` and nothing of ``models``, so every other package (and the math pins, before torch loads)
may import it."""
