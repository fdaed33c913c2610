#!/usr/bin/env python3
"""Checks that every code citation in the docs points at something real, and at no line number.

The docs are the chapters in docs/, the README, and the READMEs of csrc/, runtime/ and
torch_openreg/ where they exist. A doc cites code as `path/to/file#marker-name`; the file must exist
and contain the comment `[marker: marker-name]`. A bare `path/to/file` under one of the project's
source folders must exist too. A folder's README may cite paths from its own folder
(`core/Functions.h` in csrc/README.md); they are looked for there first, then from the root.

Line numbers go stale with the next edit, and nothing notices: a citation like `Engine.cpp:118` (or
`#L118`) is refused in the docs listed in LINE_NUMBERS_REFUSED. Prints one line per broken citation
and a closing 'N passed, N failed' line.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCE_FOLDERS = ("runtime", "csrc", "torch_openreg", "bench", "tools", "scripts", "tests")
FOLDER_READMES = ("csrc/README.md", "runtime/README.md", "torch_openreg/README.md")
# The docs that must cite no line numbers. The other chapters quote other projects' sources by line
# (docs/ecosystem.md: Lightning's, transformers', DeepSpeed's) and a compiler message with one
# (docs/compile.md); a chapter joins this list once it has none.
LINE_NUMBERS_REFUSED = {"README.md", "docs/life-of-an-operator.md", *FOLDER_READMES}
LINE_NUMBER = re.compile(r"[\w./-]+\.(?:cpp|cc|c|h|hpp|cu|py|pyi|cmake|txt|toml|map|md)(?::\d+)+\b|#L\d+\b")


def citation_pattern(folders) -> re.Pattern:
    prefixes = "|".join(re.escape(f) for f in folders)
    return re.compile(rf"`((?:{prefixes})/[\w./-]+?)(?:#([\w-]+))?`")


def docs():
    yield from sorted((ROOT / "docs").glob("*.md"))
    yield ROOT / "README.md"
    for readme in FOLDER_READMES:
        if (ROOT / readme).exists():
            yield ROOT / readme


def main() -> int:
    passed, failed = 0, 0
    for doc in docs():
        name = doc.relative_to(ROOT).as_posix()
        # A folder's README also cites from its folder; the chapters and the README from the root.
        bases = [ROOT] if name.startswith("docs/") or name == "README.md" else [doc.parent, ROOT]
        folders = set(SOURCE_FOLDERS)
        if doc.parent != ROOT and not name.startswith("docs/"):
            folders |= {p.name for p in doc.parent.iterdir() if p.is_dir() and not p.name.startswith(".")}
        cite = citation_pattern(sorted(folders))
        for lineno, line in enumerate(doc.read_text().splitlines(), 1):
            where = f"{name}:{lineno}"
            if name in LINE_NUMBERS_REFUSED:
                for number in LINE_NUMBER.findall(line):
                    print(f"{where}: cites a line number ({number}); cite `path#marker` instead")
                    failed += 1
            for path, marker in cite.findall(line):
                target = next((base / path for base in bases if (base / path).exists()), None)
                if target is None:
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
