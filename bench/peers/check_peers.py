#!/usr/bin/env python3
"""Checks the benchmark peers built by bench/peers/build.sh against a running broker.

    python3 bench/peers/check_peers.py --bootstrap-server 127.0.0.1:PORT --topic t \
        [--partitions 6] [--peers java,rdkafka,franz-go,krafka] \
        [--protocols classic,consumer] [--bin target/bench-peers/bin]

The topic must exist with --partitions partitions (default 6). For every peer and protocol:

  single   one member gets every partition; prints startup_complete -> first
           partitions_assigned and -> full assignment (ms)
  members  --members 3 (Java: MultiConsumer) splits the partitions evenly, disjointly
  static   a static member (--group-instance-id) gets every partition, is stopped with
           SIGTERM and restarted: it must get them back (the restart's latency is printed)
  static3  the same with --members 3: every member must get its own partitions back
           (franz-go with the consumer protocol: expected to fail, "xfail", because of its
           static-leave bug; the same checks with --fix-static-leave must pass)

Every run must end with shutdown_complete after SIGTERM, exit status 0 (Kafka's own
VerifiableConsumer exits 143 on SIGTERM: accepted for `java` single-member runs). Group ids
are fresh per invocation. Stdlib only; exit status 1 if any check failed. The last line is
"N passed, N failed".
"""

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


class Run:
    """One peer process and the events it printed."""

    def __init__(self, cmd, label):
        self.label = label
        self.cmd = cmd
        # stderr to a file: a chatty peer must never block on a full pipe
        self.err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.err)
        self.fd = self.proc.stdout.fileno()
        self.eof = False
        self.buf = b""
        self.events = []
        self.owned = {}  # member -> set of (topic, partition)

    def pump(self, timeout):
        if self.eof:
            time.sleep(timeout)
            return
        r, _, _ = select.select([self.fd], [], [], timeout)
        if not r:
            return
        chunk = os.read(self.fd, 65536)
        if not chunk:
            self.eof = True
            self.buf += b"\n"
        self.buf += chunk
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            try:
                ev = json.loads(line)
            except ValueError:
                continue  # e.g. Java's --consumer.config deprecation notice
            if not isinstance(ev, dict):
                continue
            self.events.append(ev)
            m = ev.get("member", 0)
            parts = {(p["topic"], p["partition"]) for p in ev.get("partitions", [])}
            if ev["name"] == "partitions_assigned":
                self.owned.setdefault(m, set()).update(parts)
            elif ev["name"] == "partitions_revoked":
                self.owned.setdefault(m, set()).difference_update(parts)

    def wait_for(self, pred, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred(self):
                return True
            if self.proc.poll() is not None:
                self.pump(0.05)
                return pred(self)
            self.pump(0.05)
        return pred(self)

    def first(self, name, nonempty=False):
        for ev in self.events:
            if ev["name"] == name and (not nonempty or ev.get("partitions")):
                return ev
        return None

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self.pump(0.05)
        if self.proc.poll() is None:
            self.proc.kill()
        rc = self.proc.wait()
        for _ in range(20):
            if self.eof:
                break
            self.pump(0.5)
        self.err.seek(0)
        self.stderr = self.err.read().decode(errors="replace")
        return rc


def latency(run):
    """(ms to the first partitions_assigned, ms to the first non-empty one, ms to full)."""
    start = run.first("startup_complete")
    if not start:
        return None
    t0 = start["timestamp"]
    first = run.first("partitions_assigned")
    nonempty = run.first("partitions_assigned", nonempty=True)
    return (first and first["timestamp"] - t0, nonempty and nonempty["timestamp"] - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bootstrap-server", required=True)
    ap.add_argument("--topic", default="t")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--peers", default="java,rdkafka,franz-go,krafka")
    ap.add_argument("--protocols", default="classic,consumer")
    ap.add_argument("--checks", default="single,members,static,static3")
    ap.add_argument("--bin", default=os.path.join(REPO, "target", "bench-peers", "bin"))
    ap.add_argument("--timeout", type=float, default=30.0, help="per wait, seconds")
    a = ap.parse_args()

    every = {(a.topic, p) for p in range(a.partitions)}
    tag = str(int(time.time()))
    passed = failed = 0
    table = []

    def cmd(peer, protocol, group, members=1, extra=()):
        if peer == "java":
            exe = "java-verifiable-consumer" if members == 1 else "java-multi-consumer"
        else:
            exe = peer + "-verifiable-consumer"
        c = [os.path.join(a.bin, exe), "--bootstrap-server", a.bootstrap_server,
             "--topic", a.topic, "--group-id", group, "--group-protocol", protocol]
        if members != 1:
            c += ["--members", str(members)]
        return c + list(extra)

    def finish(run, peer, members):
        rc = run.stop()
        ok_rc = rc == 0 or (peer == "java" and members == 1 and rc == 143)
        last = run.events[-1]["name"] if run.events else None
        problems = []
        if not ok_rc:
            problems.append("exit status %s" % rc)
        if last != "shutdown_complete":
            problems.append("last event %r, not shutdown_complete" % last)
        return problems

    def report(label, problems, run=None, note=""):
        nonlocal passed, failed
        if problems:
            failed += 1
            print("FAIL %s: %s" % (label, "; ".join(problems)), flush=True)
            if run is not None:
                print("  cmd: %s" % " ".join(run.cmd))
                for ev in run.events:
                    print("  " + json.dumps(ev, separators=(",", ":")))
                for line in getattr(run, "stderr", "").splitlines()[-15:]:
                    print("  stderr: " + line)
        else:
            passed += 1
            print("ok   %s%s" % (label, note), flush=True)

    def full_single(r):
        return r.owned.get(0) == every or any(s == every for s in r.owned.values())

    def balanced(n):
        def pred(r):
            sets = [r.owned.get(i, set()) for i in range(n)]
            union = set().union(*sets)
            return (union == every and sum(len(s) for s in sets) == len(every)
                    and max(len(s) for s in sets) - min(len(s) for s in sets) <= 1)
        return pred

    for peer in a.peers.split(","):
        for protocol in a.protocols.split(","):
            base = "%s/%s" % (peer, protocol)
            group = "chk-%s-%s-%s" % (peer, protocol, tag)

            if "single" in a.checks:
                r = Run(cmd(peer, protocol, group + "-single"), base + " single")
                got = r.wait_for(full_single, a.timeout)
                problems = [] if got else ["no full assignment: %s" % r.owned]
                problems += finish(r, peer, 1)
                lat = latency(r)
                table.append((peer, protocol, "single", lat))
                report(base + " single", problems, r,
                       " (startup->assigned %s ms, ->non-empty %s ms)" % lat if lat else "")

            if "members" in a.checks:
                r = Run(cmd(peer, protocol, group + "-members", 3), base + " members=3")
                got = r.wait_for(balanced(3), a.timeout)
                split = {m: sorted(p for _, p in s) for m, s in sorted(r.owned.items())}
                problems = [] if got else ["not split 2/2/2: %s" % split]
                problems += finish(r, peer, 3)
                report(base + " members=3", problems, r, " %s" % split)

            statics = [("static", 1, []), ("static3", 3, [])]
            if peer == "franz-go" and protocol == "consumer":
                statics += [("static", 1, ["--fix-static-leave"]), ("static3", 3, ["--fix-static-leave"])]
            for check, n, fix in statics:
                if check not in a.checks:
                    continue
                # franz-go v1.22.3's KIP-848 static leave omits the instance id (see
                # bench/peers/franz-go/main.go): without --fix-static-leave the restart is
                # expected to fail / be slow.
                xfail = peer == "franz-go" and protocol == "consumer" and not fix
                label = base + " " + check + (" " + " ".join(fix) if fix else "")
                g = "%s-%s%s" % (group, check, "-fix" if fix else "")
                extra = ["--group-instance-id", "inst-%s-%s" % (peer, protocol)] + fix
                pred = full_single if n == 1 else balanced(n)
                r1 = Run(cmd(peer, protocol, g, n, extra), label)
                problems = [] if r1.wait_for(pred, a.timeout) else ["first run: no assignment %s" % r1.owned]
                before = {m: set(s) for m, s in r1.owned.items() if s}
                problems += ["first run: " + p for p in finish(r1, peer, n)]
                if problems:
                    report(label, problems, r1)
                    continue
                r2 = Run(cmd(peer, protocol, g, n, extra), label + " restart")
                r2.wait_for(pred, a.timeout)
                # give a rebalance that would move partitions a moment to show up
                r2.wait_for(lambda r: False, 2.0)
                after = {m: set(s) for m, s in r2.owned.items() if s}
                if after != before:
                    problems.append("restart got %s, had %s" % (
                        {m: sorted(p for _, p in s) for m, s in after.items()},
                        {m: sorted(p for _, p in s) for m, s in before.items()}))
                problems += ["restart: " + p for p in finish(r2, peer, n)]
                lat = latency(r2)
                if n == 1:
                    table.append((peer, protocol, "static restart" + (" (fix)" if fix else ""), lat))
                note = " (restart: startup->assigned %s ms, ->non-empty %s ms)" % lat if lat else ""
                if xfail:
                    print("xfail %s: known franz-go bug%s%s" % (
                        label, note, ": " + "; ".join(problems) if problems else " (passed anyway)"),
                        flush=True)
                    continue
                report(label, problems, r2, note)

    print("\nstartup_complete -> partitions_assigned (first / first non-empty), ms:")
    for peer, protocol, what, lat in table:
        print("  %-9s %-9s %-15s %s" % (peer, protocol, what, "%s / %s" % lat if lat else "-"))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
