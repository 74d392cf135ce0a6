"""vLLM's own `vllm bench serve`, run from the pinned release's venv: the reference `vllm-fleet bench` is held to.

Same workload as one level of `vllm-fleet bench`: ``concurrency`` requests in flight (``--max-concurrency``),
``max_tokens`` tokens each (``--ignore-eos``), greedy; random prompts of ``input_len`` tokens (the random dataset
needs the model's tokenizer, given as a local directory: nothing is downloaded). Its JSON result carries the
median (and the requested percentiles) of TTFT, TPOT and ITL in milliseconds.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ServeBench:
    completed: int
    max_concurrency: int
    median_ttft_s: float
    median_itl_s: float
    mean_itl_s: float
    median_tpot_s: float
    result: dict[str, Any]
    """The whole JSON result `vllm bench serve --save-result` wrote."""


def vllm_bench_serve(
    python: str,
    url: str,
    model: str,
    tokenizer: Path,
    *,
    concurrency: int,
    num_prompts: int,
    max_tokens: int,
    workdir: Path,
    input_len: int = 20,
    api_key: str | None = None,
    timeout_s: float = 600,
) -> ServeBench:
    """Run `vllm bench serve` against ``url`` (its ``vllm`` next to ``python``); its figures in seconds."""
    result_file = workdir / "vllm-bench-serve.json"
    argv = [
        str(Path(python).parent / "vllm"), "bench", "serve",
        "--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions",
        "--model", model, "--tokenizer", str(tokenizer),
        "--dataset-name", "random", "--random-input-len", str(input_len), "--random-output-len", str(max_tokens),
        "--random-range-ratio", "0", "--ignore-eos", "--temperature", "0",
        "--max-concurrency", str(concurrency), "--num-prompts", str(num_prompts),
        "--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "50,95",
        "--save-result", "--result-dir", str(workdir), "--result-filename", result_file.name, "--disable-tqdm",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    if api_key:
        env["OPENAI_API_KEY"] = api_key  # what its request functions send as the bearer token
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout_s, check=False)
    if done.returncode != 0 or not result_file.is_file():
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        raise RuntimeError(f"vllm bench serve failed (exit {done.returncode}):\n{tail}")
    result = json.loads(result_file.read_text(encoding="utf-8"))
    return ServeBench(
        completed=int(result["completed"]),
        max_concurrency=int(result["max_concurrency"]),
        median_ttft_s=float(result["median_ttft_ms"]) / 1000,
        median_itl_s=float(result["median_itl_ms"]) / 1000,
        mean_itl_s=float(result["mean_itl_ms"]) / 1000,
        median_tpot_s=float(result["median_tpot_ms"]) / 1000,
        result=result,
    )
