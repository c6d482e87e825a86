"""Build registered model versions from the offline all-MiniLM-L6-v2 package.

Run as `python -m workers.modelbuild` (or `scripts/build-models`): exports an FP32 ONNX
sentence-embedding graph, derives an INT8 version with ONNX Runtime quantisation, checks
each against its reference, and registers only what passed.
"""
