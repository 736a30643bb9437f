"""The library behind the flows. Imported first by every entry point (``python -m pipeline.<module>``,
``python -m flows.<stage>``, ``mlflow models serve`` of a logged model), so it pins the CPU math
libraries there before any module imports torch (:mod:`pipeline.runtime.math_pins`); elsewhere (a notebook,
pytest) importing it changes only the default of OpenMP's wait policy
(:func:`~pipeline.runtime.math_pins.sleep_idle_openmp_threads`) and turns onnxruntime's telemetry off."""

import os

# onnxruntime's usage telemetry (a device id and an event queue it uploads to Microsoft, on by default in
# the PyPI builds): off before anything loads onnxruntime, unless the user set the variable.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

from pipeline.runtime.math_pins import pin_entry_point, sleep_idle_openmp_threads  # noqa: E402

sleep_idle_openmp_threads()  # every process that loads the pipeline, and the processes it starts
pin_entry_point()
