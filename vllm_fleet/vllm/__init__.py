"""What vllm-fleet knows about vLLM releases: flag and metric tables, the renderer, the parser check."""
