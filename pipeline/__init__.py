"""The library behind the flows. Imported first by every entry point (``python -m pipeline.<module>``,
``python -m flows.<stage>``, ``mlflow models serve`` of a logged model), so it pins the CPU math
libraries there before any module imports torch (:mod:`pipeline.runtime.math_pins`); elsewhere (a notebook,
pytest) importing it changes nothing."""

import os

# GNU OpenMP (PyTorch's CPU kernels, MKL): a thread with nothing to do sleeps at once instead of
# spinning. Alone that costs nothing; on a machine shared with other jobs a spinning thread burns the
# time slice the thread it waits for needs (benchmarks/bench_shared_machine.py: a training beside
# another 2-thread job on 2 cores). The work each thread does is the same, so are the bits
# (tests/pipeline/runtime/test_omp_wait_policy.py). Read when the OpenMP runtime loads, hence here,
# where every entry point (flows, `python -m pipeline.*` such as a second machine's train_node,
# serving) and the processes they start (torchrun's workers) get it; a user's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from pipeline.runtime.math_pins import pin_entry_point  # noqa: E402

pin_entry_point()
