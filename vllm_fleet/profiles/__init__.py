"""Decode profiles: the model (``model``), loading with field-naming errors (``loader``), the planner (memory, KV
capacity, roofline), the renderer of the flags a pinned vLLM release accepts (``render``), ``migrate`` from a
``vllm serve`` line, ``validate`` (everything that makes a profile unusable) and the roles' ``facts``."""
