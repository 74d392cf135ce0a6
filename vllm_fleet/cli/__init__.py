"""The ``vllm-fleet`` command line (``commands``) and what it prints: the plan, the end of the main job, the bench."""
