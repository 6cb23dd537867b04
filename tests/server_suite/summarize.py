"""Summarizes llama.cpp's server test suite run against several servers (run.sh).

    summarize.py OUT.md NAME=JUNIT.xml [NAME=JUNIT.xml ...]

Writes a Markdown file: the counts per server, the share of the first server's passes
(llama-server, the reference) that each other server passes, every such test it does not
pass with the reason pytest gave, the counts per test file, and every test's outcome.
"""

import sys
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from datetime import datetime, timezone

OUTCOMES = ("passed", "failed", "error", "skipped")


def outcomes(path):
    """{test id: (outcome, first line of the reason)} from a JUnit XML file."""
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        file = case.get("classname", "").replace(".", "/") + ".py"
        tid = f"{file}::{case.get('name')}"
        outcome, reason = "passed", ""
        for kind in ("failure", "error", "skipped"):
            el = case.find(kind)
            if el is not None:
                outcome = {"failure": "failed"}.get(kind, kind)
                msg = (el.get("message") or el.text or "").strip()
                reason = msg.splitlines()[0] if msg else ""
                break
        out[tid] = (outcome, reason)
    return out


def cell(reason, width=140):
    reason = reason.replace("|", "\\|").replace("`", "'")
    return reason if len(reason) <= width else reason[: width - 1] + "…"


def main():
    out_path, pairs = sys.argv[1], sys.argv[2:]
    runs = [(p.split("=", 1)[0], outcomes(p.split("=", 1)[1])) for p in pairs]
    ref_name, ref = runs[0]
    ids = sorted(set().union(*(r.keys() for _, r in runs)))
    lines = [
        "# llama.cpp's server test suite (b11434 `tools/server/tests`) on llama-server and pocket serve",
        "",
        f"Run {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC by `tests/server_suite/run.sh` (pytest -m 'not slow', "
        "one worker); models swapped by `tests/server_suite/server.sh`: SmolLM2-135M-Instruct Q4_1 for every "
        "model but gemma ones (gemma-3-270m Q4_K_M). Tests that assert the text or token counts of the suite's "
        "own models (stories260K, ...) fail on both servers under the swap.",
        "",
        "| server | " + " | ".join(OUTCOMES) + " | total |",
        "| --- |" + " ---: |" * (len(OUTCOMES) + 1),
    ]
    for name, r in runs:
        c = Counter(o for o, _ in r.values())
        lines.append(f"| {name} | " + " | ".join(str(c[o]) for o in OUTCOMES) + f" | {len(r)} |")
    ref_pass = [t for t in ids if ref.get(t, ("missing",))[0] == "passed"]
    for name, r in runs[1:]:
        both = [t for t in ref_pass if r.get(t, ("missing",))[0] == "passed"]
        share = 100.0 * len(both) / max(1, len(ref_pass))
        lines += ["", f"**{name}** passes {len(both)} of the {len(ref_pass)} tests {ref_name} passes ({share:.1f} %)."]
        extra = [t for t in ids if r.get(t, ("",))[0] == "passed" and t not in ref_pass]
        if extra:
            lines.append(f"It also passes {len(extra)} that {ref_name} does not: " + ", ".join(f"`{t}`" for t in extra))
        missed = [t for t in ref_pass if t not in both]
        if missed:
            lines += ["", f"Passed by {ref_name}, not by {name}:", "", "| test | outcome | reason |", "| --- | --- | --- |"]
            for t in missed:
                o, why = r.get(t, ("missing", ""))
                lines.append(f"| `{t}` | {o} | {cell(why)} |")
    lines += ["", "## Per file", "", "| file | " + " | ".join(f"{n} pass/fail/skip" for n, _ in runs) + " |",
              "| --- |" + " --- |" * len(runs)]
    per_file = defaultdict(lambda: defaultdict(Counter))
    for name, r in runs:
        for t, (o, _) in r.items():
            per_file[t.split("::")[0]][name][o] += 1
    for f in sorted(per_file):
        row = []
        for name, _ in runs:
            c = per_file[f][name]
            row.append(f"{c['passed']}/{c['failed'] + c['error']}/{c['skipped']}")
        lines.append(f"| `{f}` | " + " | ".join(row) + " |")
    lines += ["", "## Every test", "", "| test | " + " | ".join(n for n, _ in runs) + f" | reason ({runs[-1][0]}) |",
              "| --- |" + " --- |" * (len(runs) + 1)]
    for t in ids:
        row = [r.get(t, ("missing", ""))[0] for _, r in runs]
        why = runs[-1][1].get(t, ("", ""))[1] if row[-1] != "passed" else ""
        lines.append(f"| `{t}` | " + " | ".join(row) + f" | {cell(why, 100)} |")
    open(out_path, "w").write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
