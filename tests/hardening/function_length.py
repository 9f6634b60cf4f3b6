#!/usr/bin/env python3
"""The function length test: no function of the library or the command is over 60 lines.

    tests/hardening/function_length.py [--root DIR] [--limit LINES] [--ctags PROGRAM]

A function is read at once when it fits on a screen; a longer one is split into
named steps. Universal Ctags gives each function's first and last line (a
lambda counts with the function it is written in), over include/gpusel and
tools. Fails, naming each function over the limit with its file and line, and
each function whose last line ctags does not give (which would escape the
check). Without Universal Ctags it skips (exit 77, ctest's SKIP_RETURN_CODE)
with the reason, except where the environment variable CI is set: there it
fails, since CI installs it (.ci/run; Debian's package is universal-ctags).
"""
import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TREES = ["include/gpusel", "tools"]
SKIP = 77  # ctest's SKIP_RETURN_CODE for this test
# The names Universal Ctags goes by: Debian's alternative, its own binary, Homebrew's.
CTAGS_NAMES = ["ctags", "ctags-universal", "universal-ctags"]
# GPUSEL_API opens most definitions (an attribute or `inline`): read without it, as the compiler sees it.
CTAGS_ARGUMENTS = ["-R", "--languages=C++", "--kinds-C++=f", "--fields=+ne", "--excmd=number",
                   "-D", "GPUSEL_API=", "-o", "-"]


def universal_ctags(candidates):
    """The first of `candidates` that is Universal Ctags, and why none is when none is."""
    found = []
    for program in candidates:
        try:
            version = subprocess.run([program, "--version"], capture_output=True, text=True, check=False).stdout
        except OSError:
            continue
        if "Universal Ctags" in version:
            return program, None
        found.append(f"{program} is {version.splitlines()[0] if version else 'no ctags it knows'}")
    if found:
        return None, "; ".join(found) + ", not Universal Ctags (it gives no function's last line)"
    return None, f"Universal Ctags is not installed (tried {', '.join(candidates)})"


def functions(ctags, root):
    """(path, first line, last line or None, name) of every function definition in TREES."""
    output = subprocess.run([ctags] + CTAGS_ARGUMENTS + TREES, cwd=root, capture_output=True, text=True, check=True)
    found = []
    for row in output.stdout.splitlines():
        parts = row.split("\t")
        if len(parts) < 4:
            continue
        fields = dict(field.split(":", 1) for field in parts[3:] if ":" in field)
        if "line" not in fields:
            continue
        end = int(fields["end"]) if "end" in fields else None
        found.append((parts[1], int(fields["line"]), end, parts[0]))
    return sorted(found)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=ROOT)
    parser.add_argument("--limit", type=int, default=60, help="the most lines a function may have")
    parser.add_argument("--ctags", help=f"the Universal Ctags program (default: the first of {', '.join(CTAGS_NAMES)})")
    args = parser.parse_args()
    ctags, missing = universal_ctags([args.ctags] if args.ctags else CTAGS_NAMES)
    if ctags is None:
        if os.environ.get("CI"):
            print(f"{missing}: CI must run this test (CI is set; .ci/run installs universal-ctags)")
            return 1
        print(f"skipped: {missing}; install it (Debian: apt-get install universal-ctags) to check function lengths")
        return SKIP
    found = functions(ctags, args.root)
    problems = []
    for path, first, last, name in found:
        if last is None:
            problems.append(f"{path}:{first}: {name}: ctags gives no last line, so its length is unknown")
        elif last - first + 1 > args.limit:
            problems.append(f"{path}:{first}: {name} is {last - first + 1} lines, over the limit of {args.limit}: "
                            "split it into named steps")
    if not found:
        problems.append(f"{ctags} finds no function in {' and '.join(TREES)}: the check would check nothing")
    for problem in problems:
        print(problem)
    print(f"{len(found)} functions of {' and '.join(TREES)} checked against the {args.limit}-line limit "
          f"({ctags}): {len(problems)} problem{'s' if len(problems) != 1 else ''}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
