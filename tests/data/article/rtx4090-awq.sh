vllm serve Qwen/Qwen2.5-7B-Instruct-AWQ \
  --quantization awq \           # weights in INT4: 4 GB model
  --kv-cache-dtype fp8 \         # KV cache at half the size
  --calculate-kv-scales \
  --gpu-memory-utilization 0.94
