"""Replaces the text between <!-- NAME:start --> and <!-- NAME:end --> in
docs/benchmarks.md (appending the block if absent). Shared by the benchmarks
so each owns its own table and a rerun replaces only that table."""
import os
import re

DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "benchmarks.md")


def update(name: str, body: str, doc: str = DOC) -> None:
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{start}\n{body.rstrip()}\n{end}"
    text = open(doc).read() if os.path.exists(doc) else "# Benchmarks\n"
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    with open(doc, "w") as f:
        f.write(text)
