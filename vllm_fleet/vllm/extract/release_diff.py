"""What changed between two extracted vLLM releases, in words: flags, metric families and config semantics.

Read from the generated tables (``engine_args.json``, ``metrics.json``, ``config_semantics.json``) as plain
mappings, so the onboarding command can compare a release with the one before it right after extracting it.
Standard library only, like the rest of ``vllm_fleet.vllm.extract``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from vllm_fleet.vllm.extract.releases import version_key


def spec_at(entry: dict[str, Any], version: str) -> dict[str, Any] | None:
    """The ``specs`` row of a table entry that covers ``version`` (rows carry ``since``/``until``)."""
    key = version_key(version)
    for spec in entry.get("specs") or []:
        if version_key(spec["since"]) <= key <= version_key(spec["until"]):
            return dict(spec)
    return None


def _choice_change(what: str, old: list[Any] | None, new: list[Any] | None) -> list[str]:
    if old == new:
        return []
    if not old or not new:
        if isinstance(old, list) or isinstance(new, list):
            return [f"{what}: none -> {len(new or [])} values" if new else f"{what}: {len(old or [])} values -> none"]
        return [f"{what}: {old!r} -> {new!r}"]
    gone = [c for c in old if c not in new]
    came = [c for c in new if c not in old]
    parts = [f"+{c}" for c in came] + [f"-{c}" for c in gone]
    return [f"{what}: {' '.join(parts)}"] if parts else [f"{what}: reordered"]


def _entries(
    entries: dict[str, Any], old: str, new: str
) -> Iterator[tuple[str, dict[str, Any], dict[str, Any] | None, dict[str, Any] | None]]:
    """(name, entry, spec at ``old``, spec at ``new``) for every table entry present in either release; a spec
    is None where the entry is absent from that release."""
    for name, entry in sorted(entries.items()):
        present = entry.get("present_in") or []
        was, now = old in present, new in present
        if was or now:
            a = (spec_at(entry, old) or entry) if was else None
            b = (spec_at(entry, new) or entry) if now else None
            yield name, entry, a, b


def flag_changes(table: dict[str, Any], old: str, new: str) -> list[str]:
    """Added, removed, deprecated and re-typed ``vllm serve`` arguments from ``old`` to ``new``."""
    out: list[str] = []
    for _dest, entry, a, b in _entries(table["args"], old, new):
        if a is None:
            added = b or entry
            out.append(f"flag added: {', '.join(added['flags'])} ({added.get('group') or 'no group'})")
        elif b is None:
            out.append(f"flag removed: {', '.join(entry['flags'])}")
        elif a != b:
            name = b["flags"][0]
            if b.get("deprecated") and not a.get("deprecated"):
                out.append(f"flag deprecated: {name}")
            if a["flags"] != b["flags"]:
                out.append(f"flag respelled: {', '.join(a['flags'])} -> {', '.join(b['flags'])}")
            if (a["kind"], a["type"]) != (b["kind"], b["type"]):
                out.append(f"flag retyped: {name} {a['kind']}/{a['type']} -> {b['kind']}/{b['type']}")
            for key, what in (("choices", "choices"), ("metavar_choices", "listed values")):
                out += [f"flag {name} {c}" for c in _choice_change(what, a.get(key), b.get(key))]
            if a.get("negative_flags") != b.get("negative_flags"):
                out.append(f"flag {name} negative forms: {a.get('negative_flags')} -> {b.get('negative_flags')}")
    return out


def metric_changes(table: dict[str, Any], old: str, new: str) -> list[str]:
    """Metric families added or removed, and families whose type, labels or buckets changed."""
    out: list[str] = []
    for name, entry, a, b in _entries(table["metrics"], old, new):
        if a is None:
            added = b or entry
            out.append(f"metric added: {name} ({added.get('type')}, {added.get('conditional')})")
        elif b is None:
            out.append(f"metric removed: {name}")
        else:
            for key in ("type", "labels", "buckets", "conditional"):
                old_v, new_v = a.get(key), b.get(key)
                if old_v == new_v:
                    continue
                if isinstance(old_v, list) and isinstance(new_v, list):
                    out += [f"metric {name} {c}" for c in _choice_change(key, old_v, new_v)]
                else:
                    out.append(f"metric {name} {key}: {old_v!r} -> {new_v!r}")
    return out


def _row_value(rows: list[dict[str, Any]], version: str) -> Any:
    for row in rows:
        if version_key(row["since"]) <= version_key(version) <= version_key(row["until"]):
            return row["value"]
    return None


def semantics_changes(table: dict[str, Any], old: str, new: str) -> list[str]:
    """Config semantics (speculative keys and methods, block size and utilisation defaults...) that changed."""
    out: list[str] = []
    for key, rows in table.items():
        if not isinstance(rows, list) or not rows or not isinstance(rows[0], dict) or "since" not in rows[0]:
            continue
        a, b = _row_value(rows, old), _row_value(rows, new)
        if a == b:
            continue
        if isinstance(a, list) and isinstance(b, list):
            out += [f"{key} {c}" for c in _choice_change("", a, b)]
        else:
            out.append(f"{key}: {a!r} -> {b!r}")
    return [line.replace(" : ", ": ") for line in out]


def normalised_warning(warning: str) -> str:
    """An analysis warning without its line numbers, so a construct met before is recognised when it moved."""
    return re.sub(r":\d+", "", warning)


def new_warnings(previous: list[str], current: list[str]) -> list[str]:
    """Warnings of ``current`` whose construct ``previous`` did not have: what the reader cannot decide anew."""
    known = {normalised_warning(w) for w in previous}
    return [w for w in current if normalised_warning(w) not in known]
