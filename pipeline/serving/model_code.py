"""The logged model's code (MLflow "models from code"): MLflow runs this file to build the pyfunc
model at load time, instead of unpickling an object saved with CloudPickle (which runs whatever the
pickle says). :func:`pipeline.serving.pyfunc.log_pyfunc_model` logs this file as ``python_model``;
``CopySeqModel.load_context`` then loads the weights and vocabularies from the model's artifacts."""

import mlflow

from pipeline.serving.pyfunc import CopySeqModel

mlflow.models.set_model(CopySeqModel())
