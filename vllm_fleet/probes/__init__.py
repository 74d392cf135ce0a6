"""Probes of a live node: the smoke test (health, model, a probe load) and the /metrics checks against its profile."""
