"""The process's arithmetic: the CPU math libraries pinned before torch loads (``math_pins``, stdlib
and pyyaml only, run at package import by every entry point), what this machine does with them
(``math_check``), and the device, threads, deterministic kernels and autocast a stage computes with
(``device``). It may import ``pipeline.config`` only."""
