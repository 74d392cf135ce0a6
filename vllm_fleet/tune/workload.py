"""What a trial is measured with: the workload's shape and the SLOs it must meet, parsed from the command line.

A workload is input and output lengths (random token ids, seeded: every candidate gets the same prompts) or the
prompts of a dataset file (JSON lines ``{"prompt": "…", "output_len": 64}``), sent by ``concurrency`` closed-loop
clients: a concurrency sweep when several levels are given. Warm-up requests are sent and discarded before each
repeat; each level's requests are measured ``repeats`` times.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path

from vllm_fleet.probes.stream_client import Request

MAX_DATASET_BYTES = 64 * 1024 * 1024
MAX_LEN = 1_000_000


class WorkloadError(ValueError):
    """Bad input for a workload or an SLO: the message names the option and the fix."""


@dataclass(frozen=True)
class Workload:
    input_len: int = 256
    output_len: int = 64
    concurrency: tuple[int, ...] = (4,)
    requests: int = 0
    """Measured requests per level and repeat (0: four per client)."""
    warmup: int = 0
    """Requests sent and discarded before each repeat (0: one per client of the highest level)."""
    repeats: int = 2
    dataset: tuple[tuple[str, int], ...] = ()
    """(prompt, output tokens) read from a dataset file; empty: random token ids of ``input_len``."""
    dataset_name: str = ""
    seed: int = 0

    def requests_at(self, concurrency: int) -> int:
        return self.requests or 4 * concurrency

    @property
    def warmup_requests(self) -> int:
        return self.warmup or max(self.concurrency)

    def describe(self) -> dict[str, object]:
        shape: dict[str, object] = (
            {"dataset": self.dataset_name, "prompts": len(self.dataset)}
            if self.dataset
            else {"input_len": self.input_len, "output_len": self.output_len}
        )
        return shape | {
            "concurrency": list(self.concurrency),
            "requests_per_level": {c: self.requests_at(c) for c in self.concurrency},
            "warmup": self.warmup_requests,
            "repeats": self.repeats,
            "seed": self.seed,
        }

    def batch(self, vocab_size: int, n: int, salt: str) -> list[Request]:
        """``n`` requests, the same for every candidate (seeded by ``salt``: the repeat and the level)."""
        if self.dataset:
            start = random.Random(f"{self.seed}:{salt}").randrange(len(self.dataset))  # noqa: S311 - reproducible prompts
            picked = [self.dataset[(start + i) % len(self.dataset)] for i in range(n)]
            return [Request(prompt, out) for prompt, out in picked]
        rng = random.Random(f"{self.seed}:{salt}")  # noqa: S311 - reproducible prompts, not a secret
        low, high = min(10, vocab_size - 1), max(11, vocab_size - 10)
        return [
            Request(tuple(rng.randrange(low, high) for _ in range(self.input_len)), self.output_len) for _ in range(n)
        ]


@dataclass(frozen=True)
class SLO:
    """The service levels a candidate must meet at a concurrency level (client-side figures)."""

    ttft_p95_s: float | None = None
    itl_p95_s: float | None = None
    error_rate: float = 0.0
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    """Where each came from (``--slo`` or the profile's ``slo``), for the report."""

    def as_dict(self) -> dict[str, float | None]:
        return {"ttft_p95_s": self.ttft_p95_s, "itl_p95_s": self.itl_p95_s, "error_rate": self.error_rate}


_SLO_KEYS = {"ttft_p95": "ttft_p95_s", "itl_p95": "itl_p95_s", "error_rate": "error_rate"}


def _seconds(key: str, text: str) -> float:
    t = text.strip().lower()
    scale = 1.0
    if t.endswith("ms"):
        t, scale = t[:-2], 0.001
    elif t.endswith("s"):
        t = t[:-1]
    try:
        value = float(t) * scale
    except ValueError:
        raise WorkloadError(
            f"--slo {key}={text[:40]!r}: not a number of seconds; write e.g. {key}=0.2 or 200ms"
        ) from None
    if not math.isfinite(value) or value <= 0:
        raise WorkloadError(f"--slo {key}={text[:40]!r}: want a positive number of seconds, e.g. {key}=0.2")
    return value


def _pairs(option: str, text: str, example: str) -> list[tuple[str, str]]:
    out = []
    for part in text.split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise WorkloadError(f"{option} {part[:40]!r}: want key=value pairs separated by commas, e.g. {example}")
        out.append((key.strip(), value.strip()))
    return out


def parse_slo(text: str | None, profile_ttft: float | None, profile_itl: float | None) -> SLO:
    """``ttft_p95=2,itl_p95=200ms,error_rate=0.01``; each one not given comes from the profile's ``slo``."""
    given: dict[str, float] = {}
    for key, value in _pairs("--slo", text or "", "ttft_p95=2,itl_p95=200ms"):
        if key not in _SLO_KEYS:
            raise WorkloadError(f"--slo {key!r}: unknown; the SLOs are {', '.join(_SLO_KEYS)}")
        if key == "error_rate":
            try:
                rate = float(value)
            except ValueError:
                rate = -1.0
            if not 0 <= rate <= 1:
                raise WorkloadError(f"--slo error_rate={value[:40]!r}: want a share from 0 to 1, e.g. error_rate=0.01")
            given[key] = rate
        else:
            given[key] = _seconds(key, value)
    sources = {k: "--slo" for k in given}
    ttft, itl = given.get("ttft_p95", profile_ttft), given.get("itl_p95", profile_itl)
    for key, limit in (("ttft_p95", ttft), ("itl_p95", itl)):
        if key not in given and limit is not None:
            sources[key] = "the profile's slo"
    if ttft is None and itl is None:
        raise WorkloadError(
            "no SLO: give --slo ttft_p95=…,itl_p95=… (seconds) or set the profile's slo.ttft_p95_s / slo.itl_p95_s"
        )
    return SLO(ttft, itl, given.get("error_rate", 0.0), sources)


def _int(option: str, key: str, value: str, low: int, high: int) -> int:
    try:
        n = int(value)
    except ValueError:
        n = low - 1
    if not low <= n <= high:
        raise WorkloadError(f"{option} {key}={value[:40]!r}: want a whole number from {low} to {high}")
    return n


def read_dataset(path: Path, output_len: int) -> tuple[tuple[str, int], ...]:
    """A JSON-lines file of ``{"prompt": str, "output_len": int (optional)}``: data, bounded in size."""
    try:
        size = path.stat().st_size
        if size > MAX_DATASET_BYTES:
            raise WorkloadError(f"--workload dataset={path}: {size} bytes, over the {MAX_DATASET_BYTES} bytes bound")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise WorkloadError(
            f"--workload dataset={path}: cannot be read ({type(err).__name__}); give a UTF-8 JSON-lines file"
        ) from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        prompt = row.get("prompt") if isinstance(row, dict) else None
        out_len = row.get("output_len", output_len) if isinstance(row, dict) else None
        if not isinstance(prompt, str) or not prompt or not isinstance(out_len, int) or not 1 <= out_len <= MAX_LEN:
            raise WorkloadError(
                f'--workload dataset={path}, line {n}: want {{"prompt": "…", "output_len": 64}} (output_len optional)'
            )
        out.append((prompt, out_len))
    if not out:
        raise WorkloadError(f"--workload dataset={path}: no prompt in it")
    return tuple(out)


def parse_workload(text: str | None, concurrency: list[int], requests: int, repeats: int, seed: int = 0) -> Workload:
    """``input=256,output=64`` (random token ids) or ``dataset=FILE[,output=64]``, ``warmup=N`` for either."""
    fields: dict[str, str] = dict(_pairs("--workload", text or "", "input=256,output=64"))
    unknown = set(fields) - {"input", "output", "dataset", "warmup"}
    if unknown:
        raise WorkloadError(
            f"--workload {sorted(unknown)[0]!r}: unknown; give input=N,output=N or dataset=FILE[,output=N][,warmup=N]"
        )
    output_len = _int("--workload", "output", fields.get("output", "64"), 1, MAX_LEN)
    input_len = _int("--workload", "input", fields.get("input", "256"), 1, MAX_LEN)
    warmup = _int("--workload", "warmup", fields.get("warmup", "0"), 0, 10_000)
    dataset: tuple[tuple[str, int], ...] = ()
    name = ""
    if "dataset" in fields:
        if "input" in fields:
            raise WorkloadError("--workload: input= and dataset= together; a dataset's prompts set the input")
        path = Path(fields["dataset"])
        dataset, name, input_len = read_dataset(path, output_len), path.name, 0
    return Workload(input_len, output_len, tuple(concurrency), requests, warmup, repeats, dataset, name, seed)
