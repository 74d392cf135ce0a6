#!/bin/sh
# nvcc -- vllm-fleet lab stand-in: NOT the NVIDIA CUDA compiler. It only reports its version.
case "${1:-}" in
  --version | -V)
    echo "nvcc: NVIDIA (R) Cuda compiler driver"
    echo "Copyright (c) 2005-2025 NVIDIA Corporation"
    echo "Built on vllm-fleet lab stand-in (NOT the NVIDIA CUDA toolkit)"
    echo "Cuda compilation tools, release @CUDA_MAJOR_MINOR@, V@NVCC_VERSION@"
    echo "Build cuda_@CUDA_MAJOR_MINOR@.r@CUDA_MAJOR_MINOR@/compiler.standin_0"
    exit 0 ;;
esac
echo "nvcc: vllm-fleet lab stand-in: NOT the NVIDIA CUDA toolkit; it cannot compile (try --version)" >&2
exit 1
