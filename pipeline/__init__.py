"""The library behind the flows. Imported first by every entry point (``python -m pipeline.<module>``,
``python -m flows.<stage>``, ``mlflow models serve`` of a logged model), so it pins the CPU math
libraries there before any module imports torch (:mod:`pipeline.runtime.math_pins`); elsewhere (a notebook,
pytest) importing it changes nothing."""

from pipeline.runtime.math_pins import pin_entry_point

pin_entry_point()
