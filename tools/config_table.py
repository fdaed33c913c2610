"""Writes README.md's table of configuration variables from the runtime's registry
(Note [Configuration variables] in runtime/src/ConfigVariables.h).

    python tools/config_table.py          # rewrites the table in README.md
    python tools/config_table.py --print  # prints it

tests/test_config.py fails while the README's table differs from the registry's."""

import argparse
import pathlib
import re
import sys

from torch_openreg import _C

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
HEADER = "| variable | read by | default | accepted | meaning |\n|---|---|---|---|---|\n"


def table() -> str:
    variables = _C._config_variables()
    rows = [
        f"| `{name}` | {reader} | {default} | {accepted} | {meaning} |\n"
        for name, reader, default, accepted, meaning in variables
    ]
    return HEADER + "".join(rows)


def readme_table(text: str) -> str:
    """The README's table: its header and every row after it."""
    match = re.search(re.escape(HEADER) + r"(\|.*\n)*", text)
    if match is None:
        raise SystemExit(f"{README}: no table starting with {HEADER!r}")
    return match.group(0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--print", action="store_true", help="print the table instead of writing it")
    args = parser.parse_args()
    if args.print:
        sys.stdout.write(table())
        return 0
    text = README.read_text()
    README.write_text(text.replace(readme_table(text), table()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
