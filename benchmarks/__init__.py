"""Benchmarks: scripts that print figures and ratios (speed, memory, the training engine, decoding,
serving; benchmarks/README.md), and what they share: Gigaword-shaped synthetic data
(``gigaword_shaped``), the throughput measurements' rows, batches, timing and FLOPs (``throughput``)
and the toy copy project (``toy``, shared with the tests). A package, so the
scripts import each other and the installed ``pipeline`` and ``models`` without editing ``sys.path``:
run them as ``python -m benchmarks.<name>`` or ``python benchmarks/<name>.py``."""
