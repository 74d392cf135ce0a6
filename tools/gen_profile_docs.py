#!/usr/bin/env python3
"""Regenerate the field reference in docs/profiles.md from the DecodeProfile classes' docstrings (the profile,
then each section in profile order, then the SLOs).

Usage: tools/gen_profile_docs.py [--check]   (--check exits 1 when the file is stale)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from pydantic import BaseModel

from vllm_fleet.profiles.model import SECTIONS, DecodeProfile, SLOs

DOC = Path(__file__).resolve().parent.parent / "docs" / "profiles.md"
BEGIN, END = "<!-- fields:begin (tools/gen_profile_docs.py) -->", "<!-- fields:end -->"


def _type(annotation: object) -> str:
    text = str(annotation).replace("typing.", "").replace("vllm_fleet.profiles.model.", "")
    text = text.replace("<class '", "").replace("'>", "")
    # A validated string is shown as its validator's name: str (model_ref).
    text = re.sub(r"Annotated\[(\w+), AfterValidator\(func=<function (\w+) at 0x[0-9a-f]+>\)\]", r"\1 (\2)", text)
    text = re.sub(r"Optional\[(.*)\]$", r"\1 | None", text)
    return text.replace("NoneType", "None").replace("|", "\\|")


def table(model: type[BaseModel]) -> str:
    rows = [
        f"### `{model.__name__}`\n",
        (model.__doc__ or "").strip() + "\n",
        "| field | type | default | meaning |",
        "|---|---|---|---|",
    ]
    for name, field in model.model_fields.items():
        value = None if field.is_required() else field.get_default(call_default_factory=True)
        # A section's default is its own fields' defaults (its table below), not one long repr.
        default = (
            "required"
            if field.is_required()
            else f"{type(value).__name__}()"
            if isinstance(value, BaseModel)
            else repr(value)
        )
        desc = " ".join((field.description or "").split())
        rows.append(f"| `{name}` | `{_type(field.annotation)}` | `{default}` | {desc} |")
    return "\n".join(rows) + "\n"


def generate() -> str:
    return "\n".join(table(m) for m in (DecodeProfile, *SECTIONS.values(), SLOs))


def main(argv: list[str]) -> int:
    text = DOC.read_text(encoding="utf-8")
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    new = f"{head}{BEGIN}\n{generate()}{END}{tail}"
    if "--check" in argv:
        if new != text:
            print(f"{DOC} is stale: run tools/gen_profile_docs.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
