"""The values reference of charts/fleetnet-hub/README.md, generated from values.schema.json.

    python3 tests/chart_values.py SCHEMA VALUES README          # exit 1 when README is stale
    python3 tests/chart_values.py SCHEMA VALUES README --write  # rewrite the table in README

One row per leaf of the schema (a property without `properties` of its own), in the schema's
order: the key, its default from values.yaml, the flag or env var it becomes (`x-flag`) and its
`description`. Every key must have a description. The table sits between the markers below;
tests/chart.sh runs the check (FLEETNET_CHART_UPDATE=1 rewrites it).
"""

import difflib
import json
import sys

import yaml

BEGIN = "<!-- values reference: generated from values.schema.json by tests/chart.sh (FLEETNET_CHART_UPDATE=1); do not edit -->"
END = "<!-- end of values reference -->"
MAX_INLINE = 40


def default_cell(value):
    """A default as the table shows it: inline when short, else a pointer to values.yaml."""
    if value is None:
        return "(none)"
    if isinstance(value, str):
        return "`" + value + "`" if value else '`""`'
    text = json.dumps(value, separators=(", ", ": "))
    if len(text) > MAX_INLINE:
        return "see values.yaml"
    return "`" + text + "`"


def cell(text):
    return text.replace("|", "\\|").replace("\n", " ")


def rows(schema, values, prefix="", problems=None):
    """The table's rows under `schema`, with `values` the matching part of values.yaml."""
    out = []
    for key, prop in (schema.get("properties") or {}).items():
        path = prefix + key
        if not prop.get("description"):
            problems.append(f"{path}: no description in values.schema.json")
        value = values.get(key) if isinstance(values, dict) else None
        if prop.get("properties"):
            out.extend(rows(prop, value or {}, path + ".", problems))
            continue
        flag = prop.get("x-flag", "")
        out.append(
            "| `{}` | {} | {} | {} |".format(
                path,
                default_cell(value),
                "`" + cell(flag) + "`" if flag else "",
                cell(prop.get("description", "")),
            )
        )
    return out


def main():
    schema_path, values_path, readme_path = sys.argv[1:4]
    write = "--write" in sys.argv[4:]
    schema = json.load(open(schema_path))
    values = yaml.safe_load(open(values_path)) or {}
    problems = []
    table = [
        "| key | default | flag / env | description |",
        "|---|---|---|---|",
    ] + rows(schema, values, "", problems)
    for p in problems:
        print("FAIL " + p)
    readme = open(readme_path).read()
    if BEGIN not in readme or END not in readme:
        print(f"FAIL {readme_path}: no values reference markers")
        return 1
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    fresh = head + BEGIN + "\n" + "\n".join(table) + "\n" + END + tail
    if write:
        open(readme_path, "w").write(fresh)
        print(f"wrote {len(table) - 2} rows to {readme_path}")
    elif fresh != readme:
        diff = difflib.unified_diff(
            readme.splitlines(), fresh.splitlines(), "README.md", "generated", lineterm=""
        )
        print("\n".join(list(diff)[:60]))
        print("FAIL the values reference is stale (FLEETNET_CHART_UPDATE=1 bash tests/chart.sh rewrites it)")
        return 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
