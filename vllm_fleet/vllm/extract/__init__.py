"""Reading vLLM releases: their source -> the engine-argument table and the metric table (``vllm_fleet/vllm/data``).

vLLM is never imported: each release's ``vllm/**.py`` is parsed and evaluated statically, so any release can be
read on any machine, without CUDA or vLLM's dependencies.

- ``releases``: versions, PyPI artefacts, the cache of each release's ``vllm/**.py``.
- ``pysource``: one release's source (``ReleaseSource``) and the primitives both readers share (module names,
  relative imports, comparisons, the tables' JSON layout).
- ``flag_values``, ``flag_kwargs``, ``flag_interp``, ``flag_table``: the argparse-building code of
  ``vllm serve``, interpreted concretely (one value per expression, both branches of an undecidable ``if``).
- ``metric_conditions``, ``metric_interp``, ``metric_table``: every ``prometheus_client`` metric a release
  creates, interpreted path-sensitively (alternative values, each under its path conditions).

``tools/extract_vllm_flags.py`` and ``tools/extract_vllm_metrics.py`` are the command lines.
"""
