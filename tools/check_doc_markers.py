#!/usr/bin/env python3
"""Checks that every code citation in docs/ points at something real.

A chapter cites code as `path/to/file#marker-name`; the file must exist and contain the comment
`[marker: marker-name]`. A bare `path/to/file` under one of the project's source folders must
exist too. Prints one line per broken citation and a closing 'N passed, N failed' line.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CITE = re.compile(r"`((?:runtime|csrc|torch_openreg|bench|tools|scripts|tests)/[\w./-]+?)(?:#([\w-]+))?`")


def main() -> int:
    passed, failed = 0, 0
    for doc in sorted((ROOT / "docs").glob("*.md")):
        for lineno, line in enumerate(doc.read_text().splitlines(), 1):
            for path, marker in CITE.findall(line):
                target = ROOT / path
                where = f"{doc.relative_to(ROOT)}:{lineno}"
                if not target.exists():
                    print(f"{where}: cites {path}, which does not exist")
                    failed += 1
                elif marker and f"[marker: {marker}]" not in target.read_text(errors="replace"):
                    print(f"{where}: cites {path}#{marker}, but the file has no '[marker: {marker}]'")
                    failed += 1
                else:
                    passed += 1
    print(f"doc citations: {passed} passed, {failed} failed")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
