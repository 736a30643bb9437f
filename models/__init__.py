"""The models: torch ``nn.Module``s of the shared encoder-decoder skeleton (``seq2seq``, ``encoder``,
``decoder``, ``attention``, ``rnn``), the batched log-space maths of the extended vocabulary
(``extended``), the batch the models read (``batch``), their configuration (``config``), and one
module per copy mechanism that declares itself (``MECHANISMS``), found by ``registry``. The bottom
layer: it imports nothing of ``pipeline`` or ``flows``. This file imports nothing, so ``models.config``
or ``models.specials`` load without torch; ``models.registry`` imports every mechanism."""
