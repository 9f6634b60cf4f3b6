#!/usr/bin/env python3
"""The header file length test: no file under include/ is over 400 lines.

    tests/hardening/file_length.py [--root DIR] [--limit LINES]

A header is read as one concept: a file that grows past the limit holds more
than one job, and is split where its jobs part (its definitions, -inl.hpp files,
count like any other file). Fails, naming each file over the limit with its
line count.
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def long_files(include_dir, limit):
    """(path, lines) for each file under include_dir over `limit` lines."""
    found = []
    for directory, _, files in sorted(os.walk(include_dir)):
        for name in sorted(files):
            path = os.path.join(directory, name)
            with open(path, encoding="utf-8") as file:
                lines = sum(1 for _ in file)
            if lines > limit:
                found.append((path, lines))
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=ROOT)
    parser.add_argument("--limit", type=int, default=400)
    args = parser.parse_args()
    include_dir = os.path.join(args.root, "include")
    found = long_files(include_dir, args.limit)
    for path, lines in found:
        print(f"{os.path.relpath(path, args.root)}: {lines} lines, more than {args.limit}: split it where its jobs part")
    count = sum(len(files) for _, _, files in os.walk(include_dir))
    print(f"{count} files under include/ checked: {len(found)} over {args.limit} lines")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
