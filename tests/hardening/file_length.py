#!/usr/bin/env python3
"""The file length tests: no file under include/ is over 400 lines, no test file over 800.

    tests/hardening/file_length.py [--root DIR] [--dir include] [--limit LINES]
                                   [--suffixes .cpp ...] [--except PATH ...]

A header is read as one concept: a file that grows past the limit holds more
than one job, and is split where its jobs part (its definitions, -inl.hpp files,
count like any other file). A test file likewise specifies one header or one
command (tests/ with --limit 800, for its sources and scripts: --suffixes; the
emulated runtime and the fake NVML, whole programs, are --except'ed). Fails,
naming each file over the limit with its line count.
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def checked_files(top, suffixes, skipped):
    """Each file under `top` whose name ends in one of `suffixes` (every file when empty), but `skipped`."""
    for directory, _, files in sorted(os.walk(top)):
        for name in sorted(files):
            path = os.path.join(directory, name)
            if (not suffixes or name.endswith(tuple(suffixes))) and os.path.abspath(path) not in skipped:
                yield path


def long_files(paths, limit):
    """(path, lines) for each of `paths` over `limit` lines."""
    found = []
    for path in paths:
        with open(path, encoding="utf-8") as file:
            lines = sum(1 for _ in file)
        if lines > limit:
            found.append((path, lines))
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=ROOT)
    parser.add_argument("--dir", default="include")
    parser.add_argument("--limit", type=int, default=400)
    parser.add_argument("--suffixes", nargs="*", default=[])
    parser.add_argument("--except", dest="skipped", nargs="*", default=[])
    args = parser.parse_args()
    skipped = {os.path.abspath(os.path.join(args.root, path)) for path in args.skipped}
    paths = list(checked_files(os.path.join(args.root, args.dir), args.suffixes, skipped))
    found = long_files(paths, args.limit)
    for path, lines in found:
        print(f"{os.path.relpath(path, args.root)}: {lines} lines, more than {args.limit}: split it where its jobs part")
    print(f"{len(paths)} files under {args.dir}/ checked: {len(found)} over {args.limit} lines")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
