"""The metric reader (vllm_fleet.vllm.extract.metric_*) on small synthetic releases: one test per construct.

A fake ``vllm/v1/metrics/loggers.py`` holds a ``PrometheusStatLogger`` (the stat logger the engine always
builds); the tests check the families found, their labels, buckets and documentation, and the condition each is
classified under.
"""

from __future__ import annotations

import ast
import textwrap
from typing import Any

import pytest

from vllm_fleet.vllm.extract.metric_conditions import Cond, classify, consistent, merge_conds, pseudo_cond
from vllm_fleet.vllm.extract.metric_interp import Ctx, MetricScan
from vllm_fleet.vllm.extract.metric_table import extract_version, family_name, sample_names
from vllm_fleet.vllm.extract.pysource import ReleaseSource

LOGGER_HEAD = """
from prometheus_client import Counter, Gauge, Histogram
import prometheus_client
"""


def release(loggers: str, extra: dict[str, str] | None = None) -> ReleaseSource:
    files = {
        "vllm/__init__.py": "",
        "vllm/v1/__init__.py": "",
        "vllm/v1/metrics/__init__.py": "",
        "vllm/v1/metrics/loggers.py": textwrap.dedent(LOGGER_HEAD) + textwrap.dedent(loggers),
    }
    files.update({k: textwrap.dedent(v) for k, v in (extra or {}).items()})
    return ReleaseSource("0.0.1", files, artefact="fake.tar.gz")


def families(loggers: str, extra: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """family -> spec on the V1 engine."""
    return {fam: spec for (fam, engine), spec in extract_version(release(loggers, extra)).families.items()}


def test_names_labels_buckets_and_documentation_are_evaluated() -> None:
    fams = families(
        """
        PREFIX = "vllm:"
        BUCKETS = [0.1, 1.0]
        class PrometheusStatLogger:
            def __init__(self, vllm_config, engine_indexes=None):
                labelnames = ["model_name", "engine"]
                self.counter = Counter(name=PREFIX + "requests_total", documentation="Requests.",
                                       labelnames=labelnames)
                self.gauge = Gauge(f"{PREFIX}running", "Running.", labelnames + ["extra"])
                self.hist = Histogram(name="vllm:latency_seconds", documentation="Latency.",
                                      labelnames=labelnames, buckets=BUCKETS + [10.0])
        """
    )
    assert set(fams) == {"vllm:requests", "vllm:running", "vllm:latency_seconds"}
    assert fams["vllm:requests"]["defined_as"] == "vllm:requests_total"
    assert fams["vllm:requests"]["labels"] == ["model_name", "engine"]
    assert fams["vllm:running"]["labels"] == ["model_name", "engine", "extra"]
    assert fams["vllm:latency_seconds"]["buckets"] == [0.1, 1.0, 10.0]
    assert fams["vllm:latency_seconds"]["documentation"] == "Latency."
    assert all(spec["conditional"] == "always" for spec in fams.values())


def test_loops_and_comprehensions_over_literal_lists_create_one_family_each() -> None:
    fams = families(
        """
        class PrometheusStatLogger:
            def __init__(self, vllm_config):
                for kind in ["prompt", "generation"]:
                    Counter(name=f"vllm:{kind}_tokens", documentation="Tokens.", labelnames=[])
                self.gauges = [Gauge(name="vllm:g_" + s, documentation="G.", labelnames=[]) for s in ("a", "b")]
        """
    )
    assert set(fams) == {"vllm:prompt_tokens", "vllm:generation_tokens", "vllm:g_a", "vllm:g_b"}


def test_a_guarded_family_is_classified_by_the_feature_its_condition_reads() -> None:
    fams = families(
        """
        class PrometheusStatLogger:
            def __init__(self, vllm_config):
                if vllm_config.speculative_config is not None:
                    Counter(name="vllm:spec_decode_num_drafts", documentation="Drafts.", labelnames=[])
                if vllm_config.lora_config is None:
                    return
                Gauge(name="vllm:lora_requests_info", documentation="LoRA.", labelnames=[])
        """
    )
    assert fams["vllm:spec_decode_num_drafts"]["conditional"] == "speculative"
    assert fams["vllm:spec_decode_num_drafts"]["conditions"] == ["vllm_config.speculative_config is not None"]
    assert fams["vllm:lora_requests_info"]["conditional"] == "lora"  # after an early-return guard


def test_a_helper_class_inherits_the_condition_it_is_built_under() -> None:
    fams = families(
        """
        class SpecDecodingProm:
            def __init__(self, speculative_config, labelnames):
                self.c = Counter(name="vllm:spec_decode_num_accepted_tokens", documentation="A.",
                                 labelnames=labelnames)

        class PrometheusStatLogger:
            def __init__(self, vllm_config):
                labelnames = ["model_name"]
                if vllm_config.speculative_config:
                    self.spec = SpecDecodingProm(vllm_config.speculative_config, labelnames)
        """
    )
    spec = fams["vllm:spec_decode_num_accepted_tokens"]
    assert spec["conditional"] == "speculative"
    assert spec["created_by"].endswith("(from vllm/v1/metrics/loggers.py:PrometheusStatLogger.__init__)")
    assert spec["labels"] == ["model_name"]  # the stat logger's labelnames, passed down


def test_a_metric_outside_the_stat_logger_depends_on_its_module_feature() -> None:
    fams = families(
        "class PrometheusStatLogger:\n    pass\n",
        extra={
            "vllm/distributed/__init__.py": "",
            "vllm/distributed/kv_transfer/__init__.py": "",
            "vllm/distributed/kv_transfer/stats.py": """
                from prometheus_client import Gauge
                class KVStats:
                    def __init__(self):
                        self.g = Gauge(name="vllm:kv_transfer_bytes", documentation="Bytes.", labelnames=[])
            """,
        },
    )
    assert fams["vllm:kv_transfer_bytes"]["conditional"] == "kv_connector"


def test_a_name_it_cannot_resolve_is_a_warning_not_a_family() -> None:
    result = extract_version(
        release(
            """
            import os
            class PrometheusStatLogger:
                def __init__(self, vllm_config):
                    Counter(name=f"vllm:{os.environ['X']}", documentation="?", labelnames=[])
            """
        )
    )
    assert result.families == {}
    assert any("metric name not resolved" in w for w in result.warnings)


def expr_alternatives(code: str, expr: str) -> list[Any]:
    scan = MetricScan(release(code))
    ctx = Ctx(scan, scan.module("vllm/v1/metrics/loggers.py"), None, "<test>", {})
    tree = ast.parse(textwrap.dedent(code))
    ctx.walk_block(tree.body, ())
    return [value for value, _ in ctx.eval(ast.parse(expr, mode="eval").body)]


@pytest.mark.parametrize(
    ("code", "expr", "expected"),
    [
        ("A = 'x'", "f'{A}-y'", ["x-y"]),
        ("L = [1, 2]", "L + [3]", [[1, 2, 3]]),
        ("L = [1, 2]", "L[1]", [2]),
        ("L = [1, 2, 3]", "L[:2]", [[1, 2]]),
        ("D = {'a': 1}", "D['a']", [1]),
        ("L = [1, 2]", "[x * 2 for x in L]", [[2, 4]]),
        ("L = [3, 1]", "sorted(L)", [[1, 3]]),
        ("", "list(range(3))", [[0, 1, 2]]),
        ("", "dict(a=1)", [{"a": 1}]),
        ("X = 1 if flag else 2", "X", [1, 2]),
    ],
)
def test_expressions_evaluate_to_their_alternatives(code: str, expr: str, expected: list[Any]) -> None:
    assert expr_alternatives(code, expr) == expected


def test_conditions_merge_detect_contradictions_and_classify() -> None:
    spec = pseudo_cond("<spec>", "speculative")
    lora = pseudo_cond("<lora>", "lora")
    assert merge_conds((spec,), (spec, lora)) == (spec, lora)
    assert consistent((spec,), (lora,))
    assert not consistent((spec,), (spec.negate(),))
    assert classify([]) == ("always", [])
    assert classify([spec, lora]) == ("lora+speculative", ["<spec>", "<lora>"])
    assert classify([spec.negate()])[0] == "always"
    assert classify([spec, spec.negate()])[0] == "never"
    undecided = Cond("x()", True, frozenset(), ((frozenset(), None),))
    assert classify([undecided])[0] == "unknown"


def test_sample_names_follow_prometheus_client() -> None:
    assert family_name("vllm:x_total", "counter") == "vllm:x"
    assert sample_names("vllm:x", "counter", created=True) == ["vllm:x_total", "vllm:x_created"]
    assert sample_names("vllm:h", "histogram", created=False) == ["vllm:h_bucket", "vllm:h_count", "vllm:h_sum"]
    assert sample_names("vllm:i", "info", created=True) == ["vllm:i_info"]


def test_release_helpers_config_info_labels_bucket_tables_and_metric_class_attributes() -> None:
    fams = families(
        """
        from vllm.v1.metrics.buckets import histogram_buckets
        class PrometheusStatLogger:
            _gauge_cls = Gauge
            def __init__(self, vllm_config):
                info = vllm_config.cache_config.metrics_info()
                self.info = self._gauge_cls(name="vllm:cache_config_info", documentation="Cache.",
                                            labelnames=info.keys())
                Histogram(name="vllm:ttft_seconds", documentation="TTFT.", labelnames=[],
                          buckets=histogram_buckets("ttft"))
        """,
        extra={
            "vllm/v1/metrics/buckets.py": "_STATIC_FAMILY_DEFAULTS = {'ttft': [0.01, 0.1, 1.0]}\n",
            "vllm/config/__init__.py": """
                class CacheConfig:
                    block_size: int = 16
                    cache_dtype: str = "auto"
                    def __post_init__(self):
                        self.num_gpu_blocks = None
            """,
        },
    )
    assert fams["vllm:cache_config_info"]["type"] == "gauge"
    assert fams["vllm:cache_config_info"]["labels"] == ["block_size", "cache_dtype", "num_gpu_blocks"]
    assert fams["vllm:ttft_seconds"]["buckets"] == [0.01, 0.1, 1.0]


def test_disable_created_metrics_drops_the_created_samples() -> None:
    code = """
        class PrometheusStatLogger:
            def __init__(self, vllm_config):
                Counter(name="vllm:requests", documentation="Requests.", labelnames=[])
    """
    assert families(code)["vllm:requests"]["samples"] == ["vllm:requests_total", "vllm:requests_created"]
    off = families("prometheus_client.disable_created_metrics()\n" + textwrap.dedent(code))
    assert off["vllm:requests"]["samples"] == ["vllm:requests_total"]
