"""The experiment file as text: read it safely, find the line a key is on (tomllib keeps no
positions), and turn the first validation problem into the key and message of one line."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from storlab.errors import UserError
from storlab.factors import KeyProblem, show
from storlab.workloads import KINDS


# Limits that keep a plan finite and a file sane (docs/experiment-file.md, "Limits").
MAX_FILE_BYTES = 1024 * 1024


MAX_DEPTH = 16  # tables and lists within one another; storlab's own keys use at most four


def locate(text: str, loc: tuple) -> int | None:
    """The line of a dotted key in TOML text (tomllib keeps no positions): the table header, then the key."""
    lines = text.splitlines()
    keys = [str(k) for k in loc if not isinstance(k, int)]
    if not keys:
        return None
    start, table = 0, None
    for depth in range(len(keys) - 1, 0, -1):
        header = re.compile(r"^\s*\[\s*" + r"\s*\.\s*".join(map(re.escape, keys[:depth])) + r"\s*\]\s*$")
        for i, line in enumerate(lines):
            if header.match(line):
                start, table = i + 1, depth
                break
        if table:
            break
    leaf = keys[table or 0] if (table or 0) < len(keys) else keys[-1]
    # A key may be quoted ("my disk" = ...), or be the first part of a flattened one (a = { b = 1 }).
    leaves = "|".join(re.escape(k) for k in dict.fromkeys([leaf, leaf.split(".")[0]]))
    key_line = re.compile(r"^\s*([\"']?)(" + leaves + r")\1\s*[=.]")
    dotted = re.compile(r"^\s*" + r"\s*\.\s*".join(map(re.escape, keys[: (table or 0) + 1])) + r"\s*=")
    for i in range(start, len(lines)):
        if table and i > start and lines[i].lstrip().startswith("[") and not lines[i].lstrip().startswith("[["):
            break
        if key_line.match(lines[i]) or dotted.match(lines[i]):
            return i + 1
    if not start:
        whole = re.compile(r"^\s*\[\s*" + r"\s*\.\s*".join(map(re.escape, keys)) + r"\s*\]\s*$")
        start = next((i for i, line in enumerate(lines) if whole.match(line)), -1) + 1
    return start or None


def where(path: Path, text: str, loc: tuple) -> str:
    line = locate(text, loc)
    return f"{path.name}:{line}" if line else path.name


def first_error(exc: ValidationError) -> tuple[tuple, str]:
    err = exc.errors()[0]
    loc = tuple(err["loc"])
    cause = err.get("ctx", {}).get("error")
    if isinstance(cause, KeyProblem):
        return cause.loc, str(cause)
    if loc[:1] == ("workload",) and len(loc) > 1 and loc[1] in KINDS:
        loc = loc[:1] + loc[2:]  # the kind the value was checked against is not a key of the file
    if err["type"] == "union_tag_invalid":
        given = err["input"].get("kind") if isinstance(err.get("input"), dict) else err["ctx"]["tag"]
        return loc + ("kind",), f"expected one of {', '.join(KINDS)}, got {show(given)}"
    if err["type"] == "union_tag_not_found":
        return loc + ("kind",), f"missing (one of {', '.join(KINDS)})"
    if err["type"] == "missing":
        return loc, "missing"
    if err["type"] == "extra_forbidden":
        return loc, "unknown key"
    if err["type"] in ("model_type", "dict_type", "model_attributes_type"):
        return loc, f"expected a table, got {show(err.get('input'))}"
    message = str(cause) if cause is not None else err["msg"]
    # pydantic's union errors name each branch; the user wants the value that was wrong.
    if "Input should be" in message and "input" in err:
        message = f"{message.split(',')[0].replace('Input should be', 'expected')}, got {show(err['input'])}"
    return loc, message


def _limited(max_bytes: int) -> str:
    return "an experiment file is" if max_bytes == MAX_FILE_BYTES else "this file may be"


def read_text(path: Path, max_bytes: int = MAX_FILE_BYTES) -> str:
    """The file's text: a regular file of at most `max_bytes` of UTF-8. A FIFO, a device (/dev/zero)
    or a huge file is refused from its metadata, before a byte is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        raise UserError(f"{path}: no such experiment file") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise UserError(f"{path}: is a directory, not an experiment file")
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{path}: not a regular file (a FIFO, device or socket); give a TOML file")
        if st.st_size > max_bytes:
            raise UserError(f"{path}: {st.st_size:,} bytes; {_limited(max_bytes)} at most {max_bytes:,} bytes")
        data = os.read(fd, max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise UserError(f"{path}: more than {max_bytes:,} bytes; {_limited(max_bytes)} at most that")
    if b"\0" in data:
        raise UserError(f"{path.name}: a binary file, not TOML text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UserError(f"{path.name}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x}); save the file as UTF-8") from None


def too_deep(raw: Any) -> tuple | None:
    """The keys of the first value nested more than MAX_DEPTH levels, found without recursion: the
    checks that follow recurse, and a file of nested brackets must not exhaust their stack."""
    stack: list[tuple[tuple, Any]] = [((), raw)]
    while stack:
        loc, value = stack.pop()
        if len(loc) > MAX_DEPTH:
            return loc[:MAX_DEPTH]
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        stack.extend(((*loc, key), item) for key, item in items)
    return None


def control_character(raw: Any, loc: tuple = ()) -> tuple[tuple, str] | None:
    """The first key or string value holding a control character (a newline, an escape sequence):
    user text is shown in terminals and written into configuration files, so it must be plain."""
    items = raw.items() if isinstance(raw, dict) else enumerate(raw) if isinstance(raw, list) else ()
    for key, value in items:
        if isinstance(key, str) and any(ord(c) < 32 or ord(c) == 127 for c in key):
            return loc, f"the key {show(key)} holds a control character"
        if isinstance(value, str) and any(ord(c) < 32 or ord(c) == 127 for c in value):
            return (*loc, key), f"{show(value)} holds a control character; only printable text is allowed"
        found = control_character(value, (*loc, key))
        if found:
            return found
    return None
