#!/usr/bin/env python3
"""docs/command.md's option table, `gpusel help` and the command's parser say the same.

Three readings of which command takes which option, compared:
  - the help: each "Options of A, B and C:" section (" only" allowed) and its option lines;
  - the parser: for each option and each command the help does not give it to,
    `gpusel <command> <option>` must be the usage error "<option> is an option of
    <commands> only, not of <command>", naming the help's commands; and the names in
    tools/arguments.cpp's option table are the help's;
  - docs/command.md's "Every option" table: a row per option, a mark per command.
Usage: check_command_options.py --gpusel PATH --root SOURCE_DIR
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

COMMANDS = ["list", "explain", "pick", "run"]


def commands_named(text):
    """The commands of "list, explain and pick" or "pick and run"."""
    names = re.split(r",\s*|\s+and\s+", text.strip())
    unknown = [name for name in names if name not in COMMANDS and name != "every command"]
    if unknown:
        raise SystemExit(f"cannot read the commands in {text!r}: {unknown}")
    return set(COMMANDS) if names == ["every command"] else set(names)


def options_of_help(help_text):
    """{"--count": {"pick", "run"}, ...} and {"--count": "-n"} from the help's option sections."""
    taken, aliases, commands, in_header = {}, {}, None, False
    for line in help_text.splitlines():
        header = re.match(r"^Options of (every command|[a-z, ]+?)( only)?( \(|:)", line)
        if header:
            commands = commands_named(header.group(1))
            in_header = not line.endswith(":")  # a header may go on over lines, up to its ':'
            continue
        if in_header:
            in_header = not line.endswith(":")
            continue
        if line and not line.startswith(" "):
            commands = None  # another section: Commands, Environment, Exit status
            continue
        option = re.match(r"^  (?:(-[a-zA-Z]), )?(--[a-z][a-z-]*)", line)
        if commands is not None and option:
            taken[option.group(2)] = commands
            if option.group(1):
                aliases[option.group(2)] = option.group(1)
    return taken, aliases


def options_of_doc(markdown):
    """The same, from the table under "## Every option"."""
    section = markdown.split("\n## Every option\n", 1)
    if len(section) != 2:
        raise SystemExit('docs/command.md has no "## Every option" section')
    rows = [line for line in section[1].split("\n## ", 1)[0].splitlines() if line.startswith("|")]
    header = [cell.strip().strip("`") for cell in rows[0].strip("|").split("|")]
    columns = {name: header.index(name) for name in COMMANDS}
    taken, aliases = {}, {}
    for row in rows[2:]:
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", row.strip().strip("|"))]
        names = re.findall(r"`(-{1,2}[a-zA-Z][a-z-]*)", cells[0])
        long_names = [name for name in names if name.startswith("--")]
        if len(long_names) != 1:
            raise SystemExit(f"docs/command.md: a row names no one long option: {row}")
        taken[long_names[0]] = {name for name, column in columns.items() if cells[column] == "✓"}
        for name in names:
            if not name.startswith("--"):
                aliases[long_names[0]] = name
    return taken, aliases


def options_of_source(arguments_cpp):
    """The names in tools/arguments.cpp's option table: {"--count": "-n", "--json": ""}."""
    return dict(re.findall(r'^\s*\{"(--[a-z-]+)", "(-[a-z]?|)",', arguments_cpp, re.MULTILINE))


def parser_refusal(gpusel, command, option, environment):
    """What the parser says of `option` given to `command`: the commands it names, or None."""
    value = [VALUED[option]] if option in VALUED else []
    words = [gpusel, command, option] + value + (["--", "true"] if command == "run" else [])
    result = subprocess.run(words, capture_output=True, text=True, env=environment, timeout=30)
    said = re.search(r"is an option of (.+) only, not of " + command, result.stderr)
    if result.returncode != 2 or said is None:
        return None
    return commands_named(said.group(1))


# A value each option accepts: the parser reads it before it checks the option against the command.
VALUED = {"--count": "1", "--at-least": "1", "--at-most": "1", "--min-free": "1GiB", "--max-util": "1",
          "--exclude": "0", "--order": "free", "--format": "index"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpusel", required=True)
    parser.add_argument("--root", required=True)
    arguments = parser.parse_args()
    environment = dict(os.environ, GPUSEL_NVML_LIBRARY="/nonexistent/libnvidia-ml.so.1",
                       GPUSEL_LEASE_DIR=tempfile.mkdtemp())
    help_text = subprocess.run([arguments.gpusel, "help"], capture_output=True, text=True, check=True).stdout
    from_help, help_aliases = options_of_help(help_text)
    with open(os.path.join(arguments.root, "docs", "command.md"), encoding="utf-8") as f:
        from_doc, doc_aliases = options_of_doc(f.read())
    with open(os.path.join(arguments.root, "tools", "arguments.cpp"), encoding="utf-8") as f:
        from_source = options_of_source(f.read())
    problems = []
    if set(from_source) != set(from_help):
        problems.append(f"the parser's options and the help's differ: only the parser's {sorted(set(from_source) - set(from_help))}, "
                        f"only the help's {sorted(set(from_help) - set(from_source))}")
    for option, alias in from_source.items():
        if alias and help_aliases.get(option) != alias:
            problems.append(f"{option}: the parser's alias {alias} is not the help's {help_aliases.get(option)}")
        if alias and doc_aliases.get(option) != alias:
            problems.append(f"{option}: the parser's alias {alias} is not in docs/command.md's row")
    for option in sorted(set(from_help) | set(from_doc)):
        helped, documented = from_help.get(option), from_doc.get(option)
        if helped != documented:
            problems.append(f"{option}: the help gives it to {sorted(helped or [])}, "
                            f"docs/command.md to {sorted(documented or [])}")
        if helped is None or helped == set(COMMANDS):
            continue
        for command in sorted(set(COMMANDS) - helped):
            said = parser_refusal(arguments.gpusel, command, option, environment)
            if said != helped:
                problems.append(f"gpusel {command} {option}: the parser gives {option} to {sorted(said or [])}, "
                                f"the help to {sorted(helped)}")
    for problem in problems:
        print(problem)
    print(f"{len(from_help)} options of {len(COMMANDS)} commands compared; {len(problems)} differences")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
