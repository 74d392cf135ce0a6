"""`vllm-fleet tune`: the article's decode levers searched on one drained node against SLOs (docs/tuning.md)."""
