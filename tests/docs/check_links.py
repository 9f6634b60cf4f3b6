#!/usr/bin/env python3
"""Every relative link of the README, the changelog and docs/ resolves: the file it names exists in the source
tree, and an anchor (`file.md#section`, `#section`) names a heading of that file, as GitHub makes anchors.

And the README stays a front door: at most README_MAX_LINES lines (the guides in docs/ hold the rest).

  check_links.py SOURCE_DIR [README_MAX_LINES]
"""
import glob
import os
import re
import sys

LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(path):
    """The anchors GitHub gives the headings of a Markdown file."""
    found, fence = set(), False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                fence = not fence
            if fence or not line.startswith("#"):
                continue
            title = line.lstrip("#").strip().lower()
            slug = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
            base, n = slug, 1
            while slug in found:
                slug, n = f"{base}-{n}", n + 1
            found.add(slug)
    return found


def main():
    root = sys.argv[1]
    documents = [os.path.join(root, name) for name in ("README.md", "CHANGELOG.md")]
    documents += sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    broken, checked = [], 0
    for document in documents:
        with open(document, encoding="utf-8") as f:
            text = f.read()
        text = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks hold no links
        for target in LINK.findall(text):
            if re.match(r"^[a-z]+:", target):  # https:, mailto:
                continue
            checked += 1
            path, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(document), path)) if path else document
            shown = os.path.relpath(document, root)
            if not os.path.exists(resolved):
                broken.append(f"{shown}: {target}: no such file")
            elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
                broken.append(f"{shown}: {target}: no heading makes the anchor #{anchor}")
    if len(sys.argv) > 2:
        with open(documents[0], encoding="utf-8") as f:
            length = len(f.read().splitlines())
        if length > int(sys.argv[2]):
            broken.append(f"README.md: {length} lines, more than {sys.argv[2]}: move the detail to a guide in docs/")
    for line in broken:
        print(line)
    print(f"{len(documents)} documents, {checked} relative links, {len(broken)} broken")
    return 1 if broken or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
