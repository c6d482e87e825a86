"""The developer's and maintainer's tools of the source tree, never installed: the local stack
(`stack/`), the demo, the benchmarks (`bench/`), the chaos suite (`chaos/`) and the maintainer's
training of what the model build ships (`train_models.py`, its gates `verifier_gates.py`).

They run from a checkout through scripts/ (`python -m fleet_dev...` with the repository root as
the working directory) and sit above everything: they may import any package of the product,
internals included, as the tests do; nothing of the product imports them
(tests/unit/test_layout.py holds both). pyproject.toml leaves this package out of the wheel.
"""
