#!/usr/bin/env python3
"""Writes the compatibility matrix table from the results tests/kafka/matrix.sh collected.

    matrix_table.py WORK_DIR OUT.md VERSION...

WORK_DIR/<version>/ holds broker.env (start times, consumer-protocol mode, keys the release
does not define), group-settings.txt (the group.* and share.* lines of its server.properties),
compat.tsv (rows reported by tests/compat.rs: `S order test title`, `C test cell`) and one
<suite>.log / .status / .ms per cargo test suite. Next to OUT.md goes OUT.json with the same
data.
"""

import datetime
import json
import os
import re
import sys


def read_env(path):
    env = {}
    if os.path.exists(path):
        for line in open(path, encoding="utf-8"):
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                env[k] = v
    return env


def test_results(log_path):
    """(status by test name, panic message by test name, summary line) of a cargo test log."""
    status, panics, summary = {}, {}, None
    if not os.path.exists(log_path):
        return status, panics, summary
    lines = open(log_path, encoding="utf-8", errors="replace").read().splitlines()
    current = None
    for i, line in enumerate(lines):
        m = re.match(r"^test (\S+) \.\.\. (ok|FAILED|ignored)", line)
        if m:
            status[m.group(1)] = m.group(2)
        m = re.match(r"^---- (\S+) stdout ----$", line)
        if m:
            current = m.group(1)
        if current and "panicked at" in line and current not in panics:
            msg = lines[i + 1].strip() if i + 1 < len(lines) else ""
            fatal = re.search(r"fatal: Some\((.*?)\), closed", msg)
            if fatal:
                msg = f"{msg.split(':')[0]}; the member stopped: {fatal.group(1)}"
            panics[current] = msg[:300]
        m = re.match(r"^test result: (.*)$", line)
        if m:
            summary = m.group(1)
    return status, panics, summary


def compat_rows(tsv_path):
    """{test: (order, title)} and {test: cell} from compat.tsv."""
    starts, cells = {}, {}
    if not os.path.exists(tsv_path):
        return starts, cells
    for line in open(tsv_path, encoding="utf-8"):
        parts = line.rstrip("\n").split("\t")
        if parts[0] == "S" and len(parts) == 4:
            starts[parts[2]] = (int(parts[1]), parts[3])
        elif parts[0] == "C" and len(parts) == 3:
            cells[parts[1]] = parts[2]
    return starts, cells


def md(text):
    return text.replace("|", "\\|")


def main():
    work, out, versions = sys.argv[1], sys.argv[2], sys.argv[3:]
    data = {}
    titles = {}
    for v in versions:
        d = os.path.join(work, v)
        env = read_env(os.path.join(d, "broker.env"))
        settings = []
        p = os.path.join(d, "group-settings.txt")
        if os.path.exists(p):
            settings = [l.strip() for l in open(p, encoding="utf-8") if l.strip()]
        starts, cells = compat_rows(os.path.join(d, "compat.tsv"))
        status, panics, summary = test_results(os.path.join(d, "compat.log"))
        rows = {}
        for test, (order, title) in starts.items():
            titles.setdefault(test, (order, title))
            st = status.get(test, "not run")
            if st == "ok":
                rows[test] = {"status": "ok", "cell": cells.get(test, "ok")}
            else:
                why = panics.get(test, "")
                rows[test] = {
                    "status": st,
                    "cell": f"FAILED: {why}" if st == "FAILED" else st,
                    "observed": cells.get(test),
                }
        for test, st in status.items():
            if test not in rows:
                titles.setdefault(test, (999, test))
                rows[test] = {"status": st, "cell": f"{st}: {panics.get(test, '')}"}
        suites = {}
        for suite in ("compat", "classic", "consumer"):
            sp = os.path.join(d, f"{suite}.status")
            if not os.path.exists(sp):
                continue
            st = open(sp, encoding="utf-8").read().strip()
            if st == "skipped":
                suites[suite] = {"status": "skipped"}
                continue
            ms = int(open(os.path.join(d, f"{suite}.ms"), encoding="utf-8").read().strip())
            s_status, s_panics, s_summary = test_results(os.path.join(d, f"{suite}.log"))
            suites[suite] = {
                "exit": int(st),
                "ms": ms,
                "summary": s_summary,
                "failed": {t: s_panics.get(t, "") for t, x in s_status.items() if x == "FAILED"},
            }
        data[v] = {"broker": env, "settings": settings, "rows": rows, "suites": suites}

    order = sorted(titles, key=lambda t: titles[t])
    lines = []
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines.append("# Kafka compatibility matrix")
    lines.append("")
    lines.append(
        f"Measured by `tests/kafka/matrix.sh` on {now}, {os.cpu_count()} cores: one single-node "
        "KRaft broker per release (`tests/kafka/broker.sh start --version X`), "
        "`tests/compat.rs` against it (one row per test: what the broker answered and what the "
        "member did; rows with Java members run VerifiableConsumer of the same release), then "
        "the classic and KIP-848 suites."
    )
    lines.append("")
    header = "| behaviour | " + " | ".join(versions) + " |"
    lines.append(header)
    lines.append("|---" * (len(versions) + 1) + "|")

    def row(title, cells):
        lines.append("| " + md(title) + " | " + " | ".join(md(c) for c in cells) + " |")

    def broker_cell(v):
        env = data[v]["broker"]
        if env.get("start_failed"):
            return "FAILED to start"
        s = (
            f"ready {int(env.get('start_ms', 0)) / 1000:.1f} s after `start` "
            f"(format {env.get('format_s', '?')} s, start-to-ready {env.get('ready_s', '?')} s), "
            f"RSS {env.get('rss_mib', '?')} MiB"
        )
        if env.get("unknown_keys"):
            s += f"; keys it does not define: {env['unknown_keys']}"
        else:
            s += "; every server.properties key defined by this release"
        return s

    def settings_cell(v):
        env = data[v]["broker"]
        proto = {"none": "none", "preview": "preview", "ga": "GA"}.get(
            env.get("consumer_protocol", ""), "?"
        )
        protocols = [
            s.split("=", 1)[1]
            for s in data[v]["settings"]
            if s.startswith("group.coordinator.rebalance.protocols=")
        ]
        n = len([s for s in data[v]["settings"] if s.startswith("group.consumer.")])
        return (
            f"consumer protocol: {proto}; rebalance.protocols="
            f"{protocols[0] if protocols else '(not defined)'}; {n} group.consumer.* keys"
        )

    row("broker start (single node)", [broker_cell(v) for v in versions])
    row("broker group settings", [settings_cell(v) for v in versions])
    for test in order:
        cells = []
        for v in versions:
            r = data[v]["rows"].get(test)
            cells.append(r["cell"] if r else "not run")
        row(titles[test][1], cells)
    for suite in ("classic", "consumer"):
        cells = []
        for v in versions:
            s = data[v]["suites"].get(suite)
            if s is None:
                cells.append("not run")
            elif s.get("status") == "skipped":
                cells.append("not run: no consumer protocol v1")
            else:
                summary = s["summary"] or f"exit {s['exit']}"
                m = re.match(r"(\w+)\. (\d+) passed; (\d+) failed", summary)
                text = f"{m.group(2)} passed, {m.group(3)} failed" if m else summary
                text += f" ({s['ms'] / 1000:.1f} s)"
                if s["failed"]:
                    text += "; FAILED: " + ", ".join(
                        f"{t} ({why})" for t, why in s["failed"].items()
                    )
                cells.append(text)
        row(f"tests/{suite}.rs", cells)
    cells = []
    for v in versions:
        s = data[v]["suites"].get("compat")
        cells.append(f"{s['ms'] / 1000:.1f} s" if s and "ms" in s else "not run")
    row("tests/compat.rs wall time", cells)
    lines.append("")
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    with open(os.path.splitext(out)[0] + ".json", "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
