"""What the onboarding command says changed between two releases (vllm_fleet/vllm/extract/release_diff.py)."""

from __future__ import annotations

import json
from pathlib import Path

from vllm_fleet.vllm.extract.release_diff import flag_changes, metric_changes, new_warnings, semantics_changes

DATA = Path(__file__).resolve().parents[2] / "vllm_fleet" / "vllm" / "data"


def spec(since: str, until: str, **over: object) -> dict[str, object]:
    base = {"since": since, "until": until, "flags": ["--x"], "kind": "value", "type": "str", "choices": None}
    return {**base, **over}


def test_flags_added_removed_deprecated_and_choices() -> None:
    table = {
        "args": {
            "new": {"flags": ["--new"], "present_in": ["2"], "specs": [spec("2", "2", flags=["--new"])]},
            "gone": {"flags": ["--gone"], "present_in": ["1"], "specs": [spec("1", "1", flags=["--gone"])]},
            "x": {
                "flags": ["--x"],
                "present_in": ["1", "2"],
                "specs": [spec("1", "1", choices=["a", "b"]), spec("2", "2", choices=["a", "c"], deprecated=True)],
            },
        }
    }
    assert flag_changes(table, "1", "2") == [
        "flag removed: --gone",
        "flag added: --new (no group)",
        "flag deprecated: --x",
        "flag --x choices: +c -b",
    ]


def test_warnings_met_before_are_not_new_even_when_their_line_moved() -> None:
    before = ["vllm/a.py:10: documentation of vllm:x not resolved"]
    after = ["vllm/a.py:42: documentation of vllm:x not resolved", "vllm/b.py:7: metric name not resolved: 'y'"]
    assert new_warnings(before, after) == ["vllm/b.py:7: metric name not resolved: 'y'"]


def test_the_0_34_diff_from_the_committed_tables() -> None:
    tables = {
        name: json.loads((DATA / f"{name}.json").read_text()) for name in ("engine_args", "metrics", "config_semantics")
    }
    assert "flag added: --enable-extensible-kv-cache (CacheConfig)" in flag_changes(
        tables["engine_args"], "0.33.0", "0.34.0"
    )
    assert "metric added: vllm:request_render_duration_seconds (histogram, on_use)" in metric_changes(
        tables["metrics"], "0.33.0", "0.34.0"
    )
    semantics = semantics_changes(tables["config_semantics"], "0.33.0", "0.34.0")
    assert "block_size_default: 16 -> 64" in semantics
    assert "gpu_memory_utilization_default: 0.92 -> None" in semantics
    assert any(line.startswith("speculative_keys") and "-use_heterogeneous_vocab" in line for line in semantics)
    assert "speculative_methods: +step5_mtp -medusa -mlp_speculator" in semantics_changes(
        tables["config_semantics"], "0.32.0", "0.33.0"
    )
