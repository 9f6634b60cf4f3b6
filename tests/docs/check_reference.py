#!/usr/bin/env python3
"""Checks that docs/reference.md names every public name of gpusel.

    check_reference.py --clang clang++ --cuda-include DIR [--list]

The names come from clang's own reading of the headers (its JSON AST of one
file that includes every public header), not from a pattern guessed
over the text:
  - every declaration in namespace gpusel (and its nested namespaces other
    than detail): functions, classes, enums, aliases, variables, templates;
  - the public members of those classes: member functions, data members,
    nested types, static constants (constructors, destructors, operators and
    deleted functions are the class's own name or not names at all);
  - the enumerators of public enums;
  - the GPUSEL_* macros the public headers define.
A namespace-scope name must appear in docs/reference.md as a word. A member
(Class::member) must appear spelled so, or as a word on a line that names the
class (a table row), or in a section whose heading names the class. --list
prints the names and what is missing.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INCLUDE = os.path.join(ROOT, "include")
REFERENCE = os.path.join(ROOT, "docs", "reference.md")

NAMESPACE_KINDS = {"FunctionDecl", "FunctionTemplateDecl", "CXXRecordDecl", "ClassTemplateDecl", "EnumDecl",
                   "TypedefDecl", "TypeAliasDecl", "TypeAliasTemplateDecl", "VarDecl", "VarTemplateDecl"}
MEMBER_KINDS = {"CXXMethodDecl", "FunctionTemplateDecl", "FieldDecl", "VarDecl", "CXXRecordDecl",
                "ClassTemplateDecl", "EnumDecl", "TypedefDecl", "TypeAliasDecl", "TypeAliasTemplateDecl"}


def public_headers():
    """Every public header: include/gpusel/*.hpp and the machine component's, include/gpusel/machine/*.hpp."""
    return glob.glob(os.path.join(INCLUDE, "gpusel", "*.hpp")) + glob.glob(os.path.join(INCLUDE, "gpusel", "machine", "*.hpp"))


def ast_objects(clang, cuda_include):
    # The implementation headers must come first in their files, and declare no name the others do not.
    headers = sorted(h for h in public_headers() if not os.path.basename(h).endswith("implementation.hpp"))
    with tempfile.NamedTemporaryFile("w", suffix=".cpp", delete=False) as unit:
        unit.write("".join(f'#include "{os.path.relpath(h, INCLUDE)}"\n' for h in headers))
    try:
        # The filter dumps each `namespace gpusel` whole (and std::hash<gpusel::Device>).
        text = subprocess.run([clang, "-std=c++17", "-fsyntax-only", "-Xclang", "-ast-dump=json", "-Xclang",
                               "-ast-dump-filter", "-Xclang", "gpusel", "-I", INCLUDE, "-isystem", cuda_include,
                               unit.name], check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(unit.name)
    decoder, position, objects = json.JSONDecoder(), 0, []
    while (start := text.find("{", position)) >= 0:
        value, position = decoder.raw_decode(text, start)
        objects.append(value)
    return objects


def skipped(node):
    # parentDeclContextId: a member defined outside its class (`struct Module::Walked {...}`), which its
    # class's own listing has already judged, private or public.
    return (node.get("isImplicit") or node.get("explicitlyDeleted") or not node.get("name")
            or "parentDeclContextId" in node)


def members(record, qualified, names):
    access = "private" if record.get("tagUsed") == "class" else "public"
    for node in record.get("inner", []):
        if node["kind"] == "AccessSpecDecl":
            access = node.get("access", access)
            continue
        if access != "public" or node["kind"] not in MEMBER_KINDS or skipped(node):
            continue
        name = node["name"]
        if name.startswith("operator") or name == record.get("name"):
            continue
        names.add(f"{qualified}::{name}")
        if node["kind"] in ("CXXRecordDecl", "ClassTemplateDecl", "EnumDecl"):
            declare(node, f"{qualified}::{name}", names)


def declare(node, qualified, names):
    """The members of a class (template) or the enumerators of an enum named `qualified`."""
    if node["kind"] == "ClassTemplateDecl":
        node = next((n for n in node.get("inner", []) if n["kind"] == "CXXRecordDecl"), {})
    if node.get("kind") == "CXXRecordDecl" and node.get("completeDefinition"):
        members(node, qualified, names)
    elif node.get("kind") == "EnumDecl":
        for enumerator in node.get("inner", []):
            if enumerator["kind"] == "EnumConstantDecl":
                names.add(f"{qualified}::{enumerator['name']}")


def namespace_names(namespace, prefix, names):
    for node in namespace.get("inner", []):
        if node["kind"] == "NamespaceDecl":
            if node.get("name") != "detail":
                namespace_names(node, f"{prefix}{node['name']}::", names)
            continue
        if node["kind"] not in NAMESPACE_KINDS or skipped(node):
            continue
        name = node["name"]
        if name.startswith("operator"):
            continue
        names.add(prefix + name)
        declare(node, prefix + name, names)


def macros():
    found = set()
    for header in public_headers():
        with open(header, encoding="utf-8") as file:
            found.update(re.findall(r"^\s*#\s*define\s+(GPUSEL_[A-Z0-9_]+)", file.read(), re.MULTILINE))
    return found


def sections(markdown):
    """(heading, body) for each heading of the page."""
    parts = re.split(r"^(#{1,6} .*)$", markdown, flags=re.MULTILINE)
    return [(parts[i], parts[i + 1]) for i in range(1, len(parts) - 1, 2)]


def word(name, text):
    return re.search(r"(?<![A-Za-z0-9_])" + re.escape(name) + r"(?![A-Za-z0-9_])", text) is not None


def documented(name, markdown, page_sections):
    if word(name, markdown):
        return True
    if "::" not in name:
        return False
    owner, member = name.rsplit("::", 1)
    owner = owner.split("::")[-1]
    if any(word(owner, line) and word(member, line) for line in markdown.splitlines()):
        return True
    return any(word(owner, heading) and word(member, body) for heading, body in page_sections)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clang", default="clang++")
    parser.add_argument("--cuda-include", default="/usr/local/cuda/include")
    parser.add_argument("--list", action="store_true", help="print every public name found")
    options = parser.parse_args()

    names = set()
    for node in ast_objects(options.clang, options.cuda_include):
        if node["kind"] == "NamespaceDecl" and node.get("name") == "gpusel":
            namespace_names(node, "", names)
    names |= macros()
    if len(names) < 10:
        print(f"check_reference.py: found only {len(names)} public names; the AST was not read right")
        return 1
    try:
        with open(REFERENCE, encoding="utf-8") as file:
            markdown = file.read()
    except OSError:
        markdown = ""
    page_sections = sections(markdown)
    missing = sorted(name for name in names if not documented(name, markdown, page_sections))
    if options.list:
        print("\n".join(sorted(names)))
    if missing:
        print(f"{os.path.relpath(REFERENCE, ROOT)} does not mention {len(missing)} of {len(names)} public names:")
        print("\n".join(f"  {name}" for name in missing))
        return 1
    print(f"{os.path.relpath(REFERENCE, ROOT)} mentions all {len(names)} public names of include/gpusel/*.hpp and include/gpusel/machine/*.hpp")
    return 0


if __name__ == "__main__":
    sys.exit(main())
