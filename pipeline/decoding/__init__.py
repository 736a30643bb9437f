"""Decoding: the ``evaluate`` settings (``settings``), batched beam search and greedy over the
extended vocabulary for every mechanism (``search``), decoding a split into prediction records and
the heat map's trace (``decode``), and a split's metrics from its records (``scoring``). It may import
``pipeline.config``, ``pipeline.runtime``, ``pipeline.io``, ``pipeline.vocab``, ``pipeline.metrics``
and ``models``."""
