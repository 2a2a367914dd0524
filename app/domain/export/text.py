"""Tiny, dependency-free writers for the export formats: TOML values, YAML scalars, shell words.

Each returns text that the format's own parser reads back to the same value (tests check with tomllib,
yaml.safe_load and ``bash -n``/shlex). Strings are written as JSON strings where the format accepts them
(TOML basic strings and YAML double-quoted scalars both do), which makes escaping exact and deterministic.
"""

from __future__ import annotations

import json
import re
import shlex

TomlValue = str | bool | int | float | list[str] | list[int]

_SHELL_VARIABLE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*(:[-?][^}\"`\\$]*)?\}")


def toml_value(value: TomlValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return "[" + ", ".join(toml_value(v) for v in value) + "]"


def toml_table(name: str, values: dict[str, TomlValue], comments: dict[str, str] | None = None) -> str:
    """``[name]`` and one ``key = value`` line per entry, with an optional trailing comment per key."""
    comments = comments or {}
    lines = [f"[{name}]"]
    for key, value in values.items():
        line = f"{key} = {toml_value(value)}"
        if key in comments:
            line += f"  # {comments[key]}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def yaml_scalar(value: str | bool | int | float) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(value, ensure_ascii=False)


def shell_word(word: str) -> str:
    """One shell word. ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?message}`` stay expandable (double
    quotes); everything else is quoted literally."""
    if "$" in word:
        rest = _SHELL_VARIABLE.sub("", word)
        if any(c in rest for c in '$"`\\'):
            raise ValueError(f"cannot quote {word!r} for the shell")
        return f'"{word}"'
    return shlex.quote(word)


def shell_command(words: list[str], indent: str = "  ") -> str:
    """A command split over lines: one option (with its value) per line, joined by backslashes."""
    groups: list[list[str]] = []
    for word in words:
        previous = groups[-1] if groups else None
        if (
            previous
            and len(previous) == 1
            and previous[0].startswith("-")
            and "=" not in previous[0]
            and not word.startswith("-")
        ):
            groups[-1].append(word)  # the value of the previous option
        else:
            groups.append([word])
    lines = [" ".join(shell_word(w) for w in group) for group in groups]
    return (" \\\n" + indent).join(lines) + "\n"


def comment_block(lines: list[str], prefix: str = "# ") -> str:
    """Comment lines; a line break inside a line cannot end the comment (it becomes a space)."""
    return "".join(f"{prefix}{' '.join(line.splitlines())}".rstrip() + "\n" for line in lines)
