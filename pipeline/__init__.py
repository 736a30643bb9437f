"""The library behind the flows. Imported first by every entry point (``python -m pipeline.<module>``,
``python -m flows.<stage>``, ``mlflow models serve`` of a logged model), so it pins the CPU math
libraries there before any module imports torch (:mod:`pipeline.runtime.math_pins`); elsewhere (a notebook,
pytest) importing it changes only the default of OpenMP's wait policy
(:func:`~pipeline.runtime.math_pins.sleep_idle_openmp_threads`)."""

from pipeline.runtime.math_pins import pin_entry_point, sleep_idle_openmp_threads

sleep_idle_openmp_threads()  # every process that loads the pipeline, and the processes it starts
pin_entry_point()
