"""The logged ONNX model's code (MLflow "models from code"): MLflow runs this file to build the pyfunc
model at load time. :func:`pipeline.serving.onnx_pyfunc.log_onnx_model` logs it as ``python_model``;
``OnnxSeqModel.load_context`` then opens the export directory with onnxruntime (no torch)."""

import mlflow

from pipeline.serving.onnx_pyfunc import OnnxSeqModel

mlflow.models.set_model(OnnxSeqModel())
