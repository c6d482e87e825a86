"""`fleet models import`: a model a team already has becomes a checked, registered version.

One concept a module: `fetch` (local path or fsspec URL to a local copy), `detect` (what kind of
source it is), one converter per framework (`onnx_file`, `transformers_export`,
`sentence_transformers_export`, `tabular` for pickled estimators, `boosters` for XGBoost and
LightGBM booster files), `choices` and `graph_edits` (what an ONNX file exported elsewhere leaves
open, and the edits that make it the standard graph), `signature` (does the graph fit its task),
`samples` and `checks` (the graph against its source framework, smoke batches, INT8 gate),
`manifest` (the derived manifest: the one place that knows the manifest's fields), and `pipeline`
(stage, check, register; nothing half-registered is left behind).
"""
