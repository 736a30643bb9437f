"""The process's arithmetic: the CPU math libraries pinned before torch loads (``math_pins``, with
MKL's vendor check answered by ``mkl_vendor``; stdlib and pyyaml only, run at package import by every
entry point), what this machine does with them (``math_check``: fingerprints of the kernels the
models run, against the reference machine's), and the device, threads, deterministic kernels and
autocast a stage computes with (``device``). It may import ``pipeline.config`` and, for
``math_check``'s fingerprints, ``models``."""
