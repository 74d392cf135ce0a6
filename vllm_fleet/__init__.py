"""vllm-fleet: infrastructure-as-code for vLLM on sovereign, bare-metal GPU servers."""

__version__ = "0.1.0"
