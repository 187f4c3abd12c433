#!/usr/bin/env python3
"""The launcher's layering rules (docs/architecture.md, "The launcher's folders and layers").

Each folder of launcher/src and launcher/include/ddp/launcher is a layer. A
file may include its own layer and the layers below it, never one above it
nor a peer on its own level; ddp/common is below every layer. Of the
rendezvous helper's code (launcher/rdzv) only its line protocol,
ddp/rdzv/agent_lines.h, may be included, and only from the elastic layer
up (the layer that runs the helper). Every source and header lives in a
layer folder. Prints each crossing as
  path:line: <layer> includes <layer> (<header>)
and exits 1 when there is one, 0 when there is none.

Usage: check_layering.py <launcher source dir>
"""
import os
import re
import sys

# Lower levels first; folders on one level are peers and independent.
LEVELS = [
    ["base"],
    ["config"],
    ["process"],
    ["output", "watch", "diagnose"],
    ["report"],
    ["elastic"],
    ["supervise"],
    ["app"],
]
LEVEL = {name: i for i, names in enumerate(LEVELS) for name in names}
MAIN_LEVEL = len(LEVELS)  # main.cpp: above every layer
INCLUDE = re.compile(r'^\s*#\s*include\s+"ddp/launcher/([^"]+)"')
RDZV_INCLUDE = re.compile(r'^\s*#\s*include\s+"ddp/rdzv/([^"]+)"')
RDZV_HEADERS = {"agent_lines.h"}
RDZV_FROM = LEVEL["elastic"]


def layer_of(rel):
    """The layer of a path under src/ or include/ddp/launcher/, None when flat."""
    parts = rel.split("/")
    return parts[0] if len(parts) > 1 else None


def files(root):
    for top in ("src", "include/ddp/launcher"):
        base = os.path.join(root, top)
        for d, _, names in os.walk(base):
            for n in sorted(names):
                if n.endswith((".cpp", ".h")):
                    yield os.path.join(d, n), os.path.relpath(os.path.join(d, n), base)
    yield os.path.join(root, "main.cpp"), None


def check(root):
    problems = []
    for path, rel in files(root):
        if rel is None:
            level, name = MAIN_LEVEL, "main"
        else:
            name = layer_of(rel)
            if name not in LEVEL:
                problems.append(f"{path}:1: not in a layer folder ({', '.join(sorted(LEVEL))})")
                continue
            level = LEVEL[name]
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                r = RDZV_INCLUDE.match(line)
                if r and (r.group(1) not in RDZV_HEADERS or level < RDZV_FROM):
                    problems.append(f"{path}:{n}: {name} includes ddp/rdzv/{r.group(1)}; the launcher may include "
                                    f"only ddp/rdzv/agent_lines.h, from elastic up")
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = layer_of(m.group(1))
                if target not in LEVEL:
                    problems.append(f"{path}:{n}: includes ddp/launcher/{m.group(1)}, which is in no layer")
                elif target != name and LEVEL[target] >= level:
                    how = "a peer" if LEVEL[target] == level else "a layer above it"
                    problems.append(f"{path}:{n}: {name} includes {target}, {how} (ddp/launcher/{m.group(1)})")
    return problems


def main():
    if len(sys.argv) != 2 or not os.path.isdir(os.path.join(sys.argv[1], "src")):
        print("usage: check_layering.py <launcher source dir>", file=sys.stderr)
        return 2
    problems = check(sys.argv[1])
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} include(s) cross the launcher's layers (docs/architecture.md)")
        return 1
    print("the launcher's includes keep to its layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
