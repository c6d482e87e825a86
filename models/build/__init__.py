"""Build registered model versions from the offline all-MiniLM-L6-v2 package.

Run as `python -m models.build` (or `scripts/build-models`): exports an FP32 ONNX
sentence-embedding graph, derives an INT8 version with ONNX Runtime quantisation, checks
each against its reference, and registers only what passed. Then builds faq-intent, a
customer-support intent classifier: a softmax head trained on data/faq-intents-v1.json and
appended to the MiniLM FP32 graph (FP32 and INT8 versions).
"""
