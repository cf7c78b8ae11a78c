"""README's examples of `demo` and the analytics commands, with the output they give today.

Why generated: the examples show figures of the demo's history (`make demo`, seed 7), and a
change to the simulator, the catalog or a report changes them; written by hand they went
stale.  This runs `workloadmap demo` in a scratch folder, then every command of the README's
examples on the warehouse it wrote (the default file: no --duckdb), through a shell as a user
types them (`| head -5` included), and puts their output under them.  The suite fails when the
README's differs (tests/cli/test_readme_examples.py); ``make docs`` rewrites it.

An example block is a ```text block whose every command is `$ workloadmap demo` or an analytics
command (capacity, wait, query, feed, export, cost) on the default file (no --duckdb, or `--duckdb
workloadmap.duckdb` where a command needs it said, as `feed`): the ones on another history (a
hand-built file) are left alone.

    python docs/readme_examples.py [README]      # default: README.md beside this folder
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from workloadmap.settings import DEFAULT_DUCKDB

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
COMMANDS = ("demo", "capacity", "wait", "query", "feed", "export", "cost")
_BLOCK = re.compile(r"^```text\n(.*?)^```$", re.S | re.M)


def _commands(body: str) -> list[str] | None:
    """The `$ ...` lines of an example block, or None when it is not one of ours."""
    commands = [line[2:] for line in body.splitlines() if line.startswith("$ ")]
    for command in commands:
        words = command.split()
        if len(words) < 2 or words[0] != "workloadmap" or words[1] not in COMMANDS:
            return None
        if "--duckdb" in words and words[words.index("--duckdb") + 1:][:1] != [DEFAULT_DUCKDB]:
            return None
    return commands or None


def _run(command: str, workdir: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKLOADMAP_")}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", NO_COLOR="1", TERM="dumb")
    env.pop("COLUMNS", None)
    proc = subprocess.run(["bash", "-c", f"{command} 2>&1"], cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=300)
    return "\n".join(line.rstrip() for line in proc.stdout.rstrip("\n").splitlines())


def regenerate(text: str) -> str:
    """`text` (the README) with the output of every example block as the commands give it now."""
    with tempfile.TemporaryDirectory(prefix="readme-examples-") as scratch:
        workdir = Path(scratch)
        (workdir / "warehouse").symlink_to(ROOT / "warehouse")   # warehouse/pricing.example.yaml
        demo = _run("workloadmap demo", workdir)

        def block(match: re.Match) -> str:
            commands = _commands(match.group(1))
            if commands is None:
                return match.group(0)
            parts = [f"$ {c}\n{demo if c == 'workloadmap demo' else _run(c, workdir)}" for c in commands]
            return "```text\n" + "\n\n".join(p.rstrip("\n") for p in parts) + "\n```"

        return _BLOCK.sub(block, text)


def main(argv: list[str]) -> None:
    path = Path(argv[1]) if len(argv) > 1 else README
    text = path.read_text()
    new = regenerate(text)
    if new != text:
        path.write_text(new)
        print(f"{path}: the examples' output rewritten")
    else:
        print(f"{path}: the examples' output is current")


if __name__ == "__main__":
    main(sys.argv)
