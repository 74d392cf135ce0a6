"""Reading YAML that someone else wrote (profiles, stack configs, inventories): bounded, strict, one-line errors.

The package's own data goes through ``catalog._data.parse_yaml``; files a user, a reviewer or a colleague wrote
come through here. The limits stop what a plain ``safe_load`` lets through:
- size: a file over ``MAX_BYTES`` is refused before parsing;
- aliases: a document whose nodes, with every alias expanded, exceed ``MAX_NODES`` is refused (a "billion
  laughs" alias bomb is a few hundred bytes and expands to billions of nodes, which the validator would walk);
- duplicate keys in a mapping are refused (YAML says keys are unique; PyYAML keeps the last one silently);
- text that is not UTF-8, and YAML syntax errors, are one line naming the file, the place and the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

MAX_BYTES = 1024 * 1024
"""Largest file read (1 MiB: a 1,000-host stack config is ~200 KB)."""
MAX_NODES = 200_000
"""Most YAML nodes a document may have with every alias expanded."""

_Base: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class InputFileError(ValueError):
    """A file that cannot be read as data: ``field`` is where (``(file)``, ``(yaml)``), ``message`` the fix."""

    def __init__(self, source: str, field: str, message: str) -> None:
        self.source = source
        self.field = field
        self.message = message
        super().__init__(f"{source}: {field}: {message}")


class _StrictLoader(_Base):  # type: ignore[misc, valid-type]
    """SafeLoader (libyaml's when present) that refuses duplicate mapping keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: the base constructor reports it
                break
            if duplicate:
                first = seen[key].start_mark.line + 1
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first at line {first}): keys must be unique, keep one",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _StrictLoader.construct_mapping)


def _expanded_size(root: yaml.Node, limit: int) -> int:
    """Nodes of the document with aliases expanded (an alias is the anchored node itself), stopping at limit."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known
        total = 1
        if isinstance(node, yaml.SequenceNode):
            children: list[yaml.Node] = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children = []
        for child in children:
            total += size(child)
            if total > limit:
                break
        sizes[id(node)] = total
        return total

    return size(root)


def _failing_scalar(root: yaml.Node | None) -> str:
    """Where the first scalar that YAML cannot build is (``line L, column C: VALUE ``), or nothing."""
    loader = yaml.SafeLoader("")  # a fresh one: the failed construction left its own half-way
    todo = [root]
    while todo:
        node = todo.pop()
        if isinstance(node, yaml.ScalarNode):
            try:
                loader.construct_object(node)
            except (ValueError, OverflowError):
                mark = node.start_mark
                return f"line {mark.line + 1}, column {mark.column + 1}: {str(node.value)[:80]!r} "
        elif isinstance(node, yaml.SequenceNode):
            todo.extend(reversed(node.value))
        elif isinstance(node, yaml.MappingNode):
            todo.extend(n for pair in reversed(node.value) for n in reversed(pair))
    return ""


def parse_user_yaml(text: str, source: str) -> Any:
    """Parse one YAML document of user data, or raise InputFileError."""
    if len(text.encode("utf-8", errors="surrogateescape")) > MAX_BYTES:
        raise InputFileError(source, "(file)", f"larger than {MAX_BYTES // 1024} KiB; split it or trim it")
    loader = _StrictLoader(text)
    node: yaml.Node | None = None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node, MAX_NODES) > MAX_NODES:
            raise InputFileError(
                source,
                "(yaml)",
                f"expands to more than {MAX_NODES} nodes through its aliases (an alias bomb?); write the data out",
            )
        return loader.construct_document(node)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise InputFileError(source, "(yaml)", f"not valid YAML{where}: {what}; fix the syntax") from None
    except RecursionError:
        raise InputFileError(source, "(yaml)", "nested too deeply; flatten it") from None
    except InputFileError:
        raise
    except (ValueError, OverflowError) as err:  # a scalar YAML cannot build, e.g. the date 2027-02-30
        where = _failing_scalar(node)
        raise InputFileError(source, "(yaml)", f"{where}cannot be read ({err}); quote it or correct it") from None
    finally:
        loader.dispose()


def read_user_yaml(path: Path) -> Any:
    """Read and parse a user's YAML file, or raise InputFileError naming the file."""
    source = str(path)
    try:
        if path.stat().st_size > MAX_BYTES:
            raise InputFileError(source, "(file)", f"larger than {MAX_BYTES // 1024} KiB; split it or trim it")
        raw = path.read_bytes()
    except OSError as err:
        raise InputFileError(source, "(file)", f"cannot read: {err.strerror or err}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputFileError(
            source, "(file)", f"not UTF-8 text (byte {err.start}: {raw[err.start : err.start + 1]!r}); save it as UTF-8"
        ) from None
    return parse_user_yaml(text, source)
