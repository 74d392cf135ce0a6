"""Human-readable views of planner results (rich tables)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from vllm_fleet.profiles.planner import Plan
from vllm_fleet.project.tables import print_table

_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def print_plan(console: Console, p: Plan) -> None:
    tp = f" (per GPU, TP={p.tensor_parallel_size})" if p.tensor_parallel_size > 1 else ""
    t = Table(title=f"{p.profile}: {p.model} on {p.hardware}, vLLM {p.vllm_version}{tp}", show_header=False)
    t.add_column("figure", overflow="fold")
    t.add_column("value", justify="right", overflow="fold")
    t.add_column("how", style="dim", overflow="fold")
    rows: list[tuple[str, str, str]] = [
        ("memory model", f"vLLM {p.memory_family}", "how the pinned release sizes its KV cache (docs/planner.md)"),
        ("device memory", human_bytes(p.device_memory_bytes), "total, as torch and vLLM see it"),
        (
            "usable",
            human_bytes(p.usable_bytes),
            f"total × gpu_memory_utilization {p.gpu_memory_utilization:g}"
            + (" (a cap on vLLM's own use)" if p.extensible_kv_cache else ""),
        ),
        ("weights", human_bytes(p.weights_bytes), "linear layers in their format, the rest 16-bit"),
        ("draft weights", human_bytes(p.draft_weights_bytes), "speculative drafter"),
        (
            "activations",
            human_bytes(p.activation_reserve_bytes),
            f"profile run: sampler logits + {p.max_num_batched_tokens} batched tokens",
        ),
        ("runtime reserve", human_bytes(p.runtime_overhead_bytes), "non-torch (NCCL), CUDA graphs, context"),
        (
            "KV budget",
            human_bytes(p.kv_budget_bytes),
            "kv_cache_memory_bytes, fixed by the profile"
            if p.kv_budget_fixed
            else "an estimate: vLLM measures it after warm-up"
            if p.extensible_kv_cache
            else "usable − weights − draft − activations − reserve",
        ),
        (
            "KV bytes/token",
            human_bytes(p.kv_bytes_per_token),
            f"2 · layers · kv_heads · head_dim · {p.kv_dtype_bytes:g} B",
        ),
        ("draft KV bytes/token", human_bytes(p.draft_kv_bytes_per_token), "drafter layers share the pool"),
        ("KV capacity", f"{p.kv_capacity_tokens:,} tokens", f"{p.kv_capacity_blocks:,} blocks of {p.block_size}"),
        (
            "sequences at max_model_len",
            f"{p.max_concurrent_seqs_at_max_len:,}",
            f"capacity / {p.max_model_len:,} (max_num_seqs {p.max_num_seqs})",
        ),
        (
            "decode roofline, batch 1",
            f"{p.decode_roofline_tokens_per_s:,.1f} tok/s",
            f"{p.decode_roofline_ms_per_token} ms/token = weights / bandwidth",
        ),
        (
            f"decode roofline, batch {p.aggregate_batch}",
            f"{p.decode_roofline_aggregate_tokens_per_s:,.0f} tok/s",
            f"aggregate, {p.context_tokens} tokens of context each",
        ),
    ]
    if p.spec_decode:
        s = p.spec_decode
        rows.append(
            (
                "speculative speedup",
                f"{s.speedup:.2f}×",
                f"{s.method}, k={s.k}, α={s.alpha}, c={s.cost_ratio}; article's formula: {s.speedup_article:.2f}×",
            )
        )
    for row in rows:
        t.add_row(*row)
    print_table(console, t)
    if not p.findings:
        console.print("[green]no findings[/green]")
    for f in p.findings:
        console.print(f"[{_STYLE[f.severity]}]{f.severity}[/] {f.field}: {f.message}", highlight=False)
