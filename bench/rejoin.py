#!/usr/bin/env python3
"""Rejoin-latency benchmark: this crate side by side with the Java KafkaConsumer, librdkafka,
franz-go and krafka, and the wire floor, on one real broker, in one run.

Run it through bench/rejoin.sh (builds everything, starts the broker). Every client is driven
through the interface of Kafka's system-test consumer (org.apache.kafka.tools.VerifiableConsumer):
the same flags, JSON-line events on stdout. Times run from a member's `startup_complete` (printed
after the client object exists, right before it subscribes: process and JVM start excluded) to the
`partitions_assigned` that completes the scenario, both stamped by the client process itself.

Scenarios (each repeated --reps times, reported as median and p90):
  a  classic static member restart -> assignment delivered (SIGTERM, start again, same instance id)
  b  KIP-848 join -> first assignment (a new group each time)
  c  KIP-848 static member restart -> assignment back
  d  a dynamic member joins a stable 3-member group -> all 4 stable again (classic and KIP-848),
     i.e. the partitions, as the events of all 4 processes tell them, are disjoint, complete and
     balanced; then the 4th is stopped and the 3 settle before the next repetition
  e  100 members in one process (--members 100) -> all stable (KIP-848; classic with --classic-e)

Output: a table of medians / p90 with the ratios ours/peer and ours/floor, every sample in a JSON
file, and a PNG plot.
"""

import argparse
import json
import os
import queue
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.path.join(REPO, "target")
PEERS = os.path.join(TARGET, "bench-peers")

# Heartbeat interval for the classic protocol, given to every client alike (the consumer
# protocol's interval is the broker's, 500 ms in tests/kafka/single.properties.in).
CLASSIC_PROPS = {"heartbeat.interval.ms": "500", "session.timeout.ms": "10000"}

ALL_CLIENTS = ["ours", "java", "rdkafka", "franz-go", "krafka"]


def log(msg):
    print(f"rejoin: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------- clients


class Client:
    """How to start one client's verifiable consumer."""

    def __init__(self, name, single, multi=None, protocols=("classic", "consumer"), env=None):
        self.name = name
        self.single = single  # argv prefix, one member per process
        self.multi = multi or single  # argv prefix accepting --members N
        self.protocols = protocols
        self.env = env

    def argv(self, bootstrap, topic, group, protocol, instance=None, members=1, config=None):
        base = self.multi if members > 1 else self.single
        argv = list(base) + [
            "--bootstrap-server", bootstrap, "--topic", topic, "--group-id", group,
            "--group-protocol", protocol,
        ]
        if instance:
            argv += ["--group-instance-id", instance]
        if members > 1:
            argv += ["--members", str(members)]
        if protocol == "classic":
            argv += ["--session-timeout", CLASSIC_PROPS["session.timeout.ms"]]
        if config:
            argv += ["--consumer.config", config]
        return argv


def clients(peer_libs):
    """The verifiable consumers, through the launchers bench/peers/build.sh writes."""
    bin_dir = os.path.join(PEERS, "bin")
    return {
        "ours": Client("ours", [os.path.join(TARGET, "release/examples/verifiable_consumer")]),
        # Kafka's own org.apache.kafka.tools.VerifiableConsumer; MultiConsumer for --members.
        "java": Client(
            "java",
            [os.path.join(bin_dir, "java-verifiable-consumer")],
            multi=[os.path.join(bin_dir, "java-multi-consumer")],
        ),
        "rdkafka": Client("rdkafka", [os.path.join(bin_dir, "rdkafka-verifiable-consumer")]),
        "franz-go": Client("franz-go", [os.path.join(bin_dir, "franz-go-verifiable-consumer")]),
        "krafka": Client("krafka", [os.path.join(bin_dir, "krafka-verifiable-consumer")]),
    }


def ts(ev):
    """An event's time in ms: `timestamp_us` (this crate's extension) when there, else the
    `timestamp` every verifiable consumer prints (whole ms)."""
    if "timestamp_us" in ev:
        return ev["timestamp_us"] / 1000.0
    return float(ev["timestamp"])


class Proc:
    """A running client process and the events it printed."""

    def __init__(self, argv, label, env=None):
        self.label = label
        self.events = queue.Queue()
        self.all = []
        self.stderr_tail = []
        self.p = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
            env=env, start_new_session=True,
        )
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                continue
            if ev.get("name") in ("records_consumed", "record_data"):
                continue
            self.events.put(ev)
        self.events.put(None)

    def _read_err(self):
        for line in self.p.stderr:
            self.stderr_tail.append(line.rstrip())
            del self.stderr_tail[:-30]

    def next_event(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{self.label}: timed out")
        try:
            ev = self.events.get(timeout=left)
        except queue.Empty:
            raise TimeoutError(f"{self.label}: timed out") from None
        if ev is None:
            raise RuntimeError(f"{self.label}: exited ({self.p.poll()}): " + "\n".join(self.stderr_tail[-10:]))
        self.all.append(ev)
        return ev

    def stop(self, timeout=30):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                log(f"{self.label}: no exit {timeout} s after SIGTERM; killing it")
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()


class Owners:
    """Who owns which partition, as the events of every member tell it."""

    def __init__(self):
        self.owned = {}  # (proc label, member) -> set of (topic, partition)

    def apply(self, label, ev):
        key = (label, ev.get("member", 0))
        parts = {(p["topic"], p["partition"]) for p in ev.get("partitions", [])}
        mine = self.owned.setdefault(key, set())
        if ev["name"] == "partitions_assigned":
            mine |= parts
        elif ev["name"] == "partitions_revoked":
            mine -= parts

    def forget(self, label):
        for key in [k for k in self.owned if k[0] == label]:
            del self.owned[key]

    def settled(self, partitions, members):
        """Disjoint, complete and balanced over exactly `members` members."""
        live = [s for s in self.owned.values()]
        if len(live) != members:
            return False
        total = sum(len(s) for s in live)
        union = set().union(*live) if live else set()
        if total != len(union) or len(union) != partitions:
            return False
        sizes = [len(s) for s in live]
        return max(sizes) - min(sizes) <= 1 and min(sizes) > 0


def wait_settled(procs, owners, partitions, members, timeout):
    """Feeds the events of `procs` into `owners` until they settle; returns the timestamp (ms) of
    the event that settled them."""
    deadline = time.monotonic() + timeout
    while True:
        progressed = False
        for pr in procs:
            while True:
                try:
                    ev = pr.events.get_nowait()
                except queue.Empty:
                    break
                if ev is None:
                    raise RuntimeError(f"{pr.label}: exited ({pr.p.poll()}): " + "\n".join(pr.stderr_tail[-10:]))
                pr.all.append(ev)
                progressed = True
                if ev["name"] in ("partitions_assigned", "partitions_revoked"):
                    owners.apply(pr.label, ev)
                    if owners.settled(partitions, members):
                        return ts(ev)
        if time.monotonic() > deadline:
            raise TimeoutError(f"not settled over {members} members within {timeout} s: "
                               + str({k: len(v) for k, v in owners.owned.items()}))
        if not progressed:
            time.sleep(0.002)


def startup_of(pr, deadline):
    """The earliest `startup_complete` timestamp of a process (several with --members)."""
    while True:
        for ev in pr.all:
            if ev["name"] == "startup_complete":
                return ts(ev)
        pr.next_event(deadline)


def first_assignment(pr, deadline):
    """(startup_complete, first non-empty partitions_assigned) timestamps of a one-member process."""
    start = None
    while True:
        ev = pr.next_event(deadline)
        if ev["name"] == "startup_complete":
            start = ts(ev)
        elif ev["name"] == "partitions_assigned" and ev.get("partitions"):
            if start is None:
                raise RuntimeError(f"{pr.label}: assignment before startup_complete")
            return start, ts(ev)


# ---------------------------------------------------------------------------------- scenarios


class Bench:
    def __init__(self, args, bootstrap, peer_libs):
        self.args = args
        self.bootstrap = bootstrap
        self.clients = clients(peer_libs)
        self.run_id = uuid.uuid4().hex[:6]
        self.samples = []  # dicts: client, scenario, protocol, rep, ms
        self.errors = []
        self.config = {}
        for protocol in ("classic", "consumer"):
            path = os.path.join(TARGET, "bench", f"{protocol}.properties")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                if protocol == "classic":
                    for k, v in CLASSIC_PROPS.items():
                        f.write(f"{k}={v}\n")
            self.config[protocol] = path

    def spawn(self, client, protocol, group, instance=None, members=1, label=None, topic=None):
        c = self.clients[client]
        argv = c.argv(self.bootstrap, topic or self.args.topic6, group, protocol, instance, members,
                      self.config[protocol])
        return Proc(argv, label or f"{client}/{group}", env=c.env)

    def record(self, client, scenario, protocol, rep, ms):
        self.samples.append({"client": client, "scenario": scenario, "protocol": protocol, "rep": rep, "ms": ms})
        log(f"{scenario} {protocol:8} {client:8} rep {rep:2}: {ms:.2f} ms")

    def guard(self, client, scenario, protocol, fn):
        try:
            fn()
        except Exception as e:  # one client failing does not stop the others
            msg = f"{scenario} {protocol} {client}: {e}"
            log("FAILED " + msg)
            self.errors.append(msg)

    # a, b, c: one member's time to its assignment; every participant (floors and clients) does
    # one repetition in turn, in a rotating order, after untimed warm-up repetitions, so broker
    # warm-up (JIT) and machine load fall on all of them alike.
    def one_member(self, client, protocol, scenario, rep, static):
        """One repetition for a client: start it (a new group for b; the client's static group for
        a and c, which an untimed first run formed), time it, stop it with SIGTERM."""
        if static:
            group, instance = f"{scenario}-{client}-{self.run_id}", f"{client}-static"
        else:
            group, instance = f"{scenario}-{client}-{self.run_id}-{rep}", None
        pr = self.spawn(client, protocol, group, instance)
        try:
            start, assigned = first_assignment(pr, time.monotonic() + 60)
        finally:
            pr.stop()
        return assigned - start

    def floor_rep(self, scenario, mode, rep, handshake):
        """One repetition of the wire floor in a fresh process (as every client runs); with
        `handshake`, ApiVersions first on each connection ("floor+av"), as any client that
        negotiates versions sends. rep -1: the untimed setup of the static scenarios (none for b);
        other negative reps are untimed warm-ups."""
        name = "floor+av" if handshake else "floor"
        group = f"{scenario}-{name}-{self.run_id}"
        env = dict(os.environ)
        env.pop("WIRE_FLOOR_API_VERSIONS", None)
        if handshake:
            env["WIRE_FLOOR_API_VERSIONS"] = "1"
        if rep == -1:
            if mode == "consumer-join":
                return None
            extra = ["--reps", "0"]
        elif mode == "consumer-join":
            extra = ["--reps", "1"]
            group = f"{group}-{rep}"
        else:
            extra = ["--reps", "1", "--no-setup"]
        out = subprocess.run(
            [self.args.wire_floor, mode, "--bootstrap", self.bootstrap, "--topic", self.args.topic6,
             "--group", group, *extra],
            capture_output=True, text=True, timeout=120, env=env,
        )
        if out.returncode != 0:
            raise RuntimeError(out.stderr.strip())
        lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
        return lines[0]["ms"] if lines else None

    def interleaved(self, scenario, protocol, floor_mode, names):
        static = scenario in ("a", "c")
        runners = {}
        for name in names:
            if name in ("floor", "floor+av"):
                runners[name] = (lambda rep, n=name: self.floor_rep(scenario, floor_mode, rep, n == "floor+av"))
            else:
                runners[name] = (lambda rep, n=name: self.one_member(n, protocol, scenario, rep, static))
        live = list(names)
        # Setup (static: the member exists) and warm-up, untimed.
        for rep in ([-1] if static else []) + [-2, -3]:
            for name in list(live):
                try:
                    runners[name](rep)
                except Exception as e:
                    self.errors.append(f"{scenario} {protocol} {name}: {e}")
                    log(f"FAILED {scenario} {protocol} {name}: {e}")
                    live.remove(name)
        for rep in range(self.args.reps):
            k = rep % max(len(live), 1)
            for name in live[k:] + live[:k]:
                try:
                    ms = runners[name](rep)
                except Exception as e:
                    self.errors.append(f"{scenario} {protocol} {name} rep {rep}: {e}")
                    log(f"FAILED {scenario} {protocol} {name} rep {rep}: {e}")
                    continue
                if ms is not None:
                    self.record(name, scenario, protocol, rep, ms)

    # d: a 4th dynamic member joins a stable group of 3.
    def fourth_joins(self, client, protocol, scenario):
        group = f"{scenario}-{client}-{self.run_id}-{protocol}"
        topic = self.args.topic12
        owners = Owners()
        three = [self.spawn(client, protocol, group, label=f"{client}#{i}", topic=topic) for i in range(3)]
        try:
            wait_settled(three, owners, 12, 3, 120)
            phase = random.Random(7)
            for rep in range(self.args.reps):
                # The 3 heartbeat in step once they settled together: start the 4th at a random
                # point of their heartbeat cycle, not always right after it.
                time.sleep(phase.uniform(0, 1.0))
                fourth = self.spawn(client, protocol, group, label=f"{client}#4.{rep}", topic=topic)
                try:
                    start = startup_of(fourth, time.monotonic() + 60)
                    for ev in fourth.all:
                        if ev["name"] in ("partitions_assigned", "partitions_revoked"):
                            owners.apply(fourth.label, ev)
                    settled = wait_settled(three + [fourth], owners, 12, 4, 120)
                    self.record(client, scenario, protocol, rep, settled - start)
                finally:
                    fourth.stop()
                    owners.forget(fourth.label)
                wait_settled(three, owners, 12, 3, 120)
        finally:
            for p in three:
                p.stop()

    # e: 100 members in one process.
    def hundred(self, client, protocol, scenario):
        n = self.args.members
        for rep in range(self.args.reps_e):
            group = f"{scenario}-{client}-{self.run_id}-{protocol}-{rep}"
            owners = Owners()
            pr = self.spawn(client, protocol, group, members=n, label=f"{client}x{n}", topic=self.args.topic_e)
            try:
                start = startup_of(pr, time.monotonic() + 120)
                for ev in pr.all:
                    if ev["name"] in ("partitions_assigned", "partitions_revoked"):
                        owners.apply(pr.label, ev)
                settled = wait_settled([pr], owners, self.args.partitions_e, n, 300)
                self.record(client, scenario, protocol, rep, settled - start)
            finally:
                pr.stop(timeout=120)

    def run(self):
        want = [c for c in ["floor", "floor+av"] + ALL_CLIENTS if c in self.args.clients]
        for s in self.args.scenarios:
            if s in "abc":
                protocol = "classic" if s == "a" else "consumer"
                mode = {"a": "classic-static-restart", "b": "consumer-join", "c": "consumer-static-restart"}[s]
                names = [n for n in want if n.startswith("floor") or protocol in self.clients[n].protocols]
                self.interleaved(s, protocol, mode, names)
                continue
            plan = []
            if s == "d":
                plan = [("classic", self.fourth_joins), ("consumer", self.fourth_joins)]
            elif s == "e":
                plan = [("consumer", self.hundred)] + ([("classic", self.hundred)] if self.args.classic_e else [])
            for protocol, fn in plan:
                for name in want:
                    if name.startswith("floor"):
                        continue
                    if protocol not in self.clients[name].protocols:
                        self.errors.append(f"{s} {protocol} {name}: not supported by the client")
                        continue
                    self.guard(name, s, protocol, lambda: fn(name, protocol, s))


# ---------------------------------------------------------------------------------- report


def quantile(xs, q):
    xs = sorted(xs)
    if not xs:
        return None
    k = (len(xs) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


SCENARIO_NAMES = {
    "a": "classic static restart",
    "b": "KIP-848 join",
    "c": "KIP-848 static restart",
    "d": "4th member joins 3",
    "e": "100 members, 1 process",
}


def summarize(samples):
    rows = {}
    for s in samples:
        rows.setdefault((s["scenario"], s["protocol"]), {}).setdefault(s["client"], []).append(s["ms"])
    table = []
    for (scenario, protocol), by_client in sorted(rows.items()):
        row = {"scenario": scenario, "protocol": protocol, "name": SCENARIO_NAMES[scenario], "clients": {}}
        for client, xs in by_client.items():
            row["clients"][client] = {"n": len(xs), "median": statistics.median(xs), "p90": quantile(xs, 0.9)}
        ours = row["clients"].get("ours")
        if ours:
            row["ratios"] = {
                c: ours["median"] / v["median"] for c, v in row["clients"].items() if c != "ours" and v["median"] > 0
            }
        table.append(row)
    return table


def render(table, errors):
    cols = ["ours", "floor", "floor+av"] + [c for c in ALL_CLIENTS if c != "ours"]
    lines = []
    head = ("| scenario | protocol | " + " | ".join(cols)
            + " | ours/floor | ours/floor+av | fastest peer | ours/fastest peer |")
    lines.append(head)
    lines.append("|" + "---|" * (head.count("|") - 1))
    for row in table:
        cells = []
        for c in cols:
            v = row["clients"].get(c)
            cells.append(f"{v['median']:.1f} / {v['p90']:.1f}" if v else "-")
        r = row.get("ratios", {})
        peers = {c: v for c, v in row["clients"].items() if c not in ("ours", "floor", "floor+av")}
        fastest = min(peers, key=lambda c: peers[c]["median"]) if peers else None
        floor_ratio = f"{r['floor']:.2f}" if "floor" in r else "-"
        av_ratio = f"{r['floor+av']:.2f}" if "floor+av" in r else "-"
        fastest_ratio = f"{r[fastest]:.2f}" if fastest in r else "-"
        lines.append(f"| {row['scenario']} {row['name']} | {row['protocol']} | " + " | ".join(cells)
                     + f" | {floor_ratio} | {av_ratio} | {fastest or '-'} | {fastest_ratio} |")
    # Every ratio ours/other, of medians (< 1: ours is faster).
    others = ["floor", "floor+av"] + [c for c in ALL_CLIENTS if c != "ours"]
    lines.append("")
    lines.append("| ours / ... | protocol | " + " | ".join(others) + " |")
    lines.append("|" + "---|" * (len(others) + 2))
    for row in table:
        r = row.get("ratios", {})
        lines.append(f"| {row['scenario']} {row['name']} | {row['protocol']} | "
                     + " | ".join(f"{r[c]:.2f}" if c in r else "-" for c in others) + " |")
    out = "\n".join(lines)
    out += ("\n\nCells: median / p90 in ms (startup_complete -> assignment reached the application). "
            "floor: the scenario's requests sent raw; floor+av: the same with ApiVersions first on each "
            "connection. Ratios are of medians.")
    if errors:
        out += "\n\nNot measured:\n" + "\n".join(f"- {e}" for e in errors)
    return out


def plot(table, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib missing: no plot")
        return
    cols = ["ours", "floor", "floor+av"] + [c for c in ALL_CLIENTS if c != "ours"]
    fig, axes = plt.subplots(1, len(table), figsize=(3.2 * len(table), 4.2), squeeze=False)
    colors = {"ours": "#d62728", "floor": "#7f7f7f", "floor+av": "#bcbcbc", "java": "#1f77b4", "rdkafka": "#2ca02c",
              "franz-go": "#9467bd", "krafka": "#ff7f0e"}
    for ax, row in zip(axes[0], table):
        names = [c for c in cols if c in row["clients"]]
        med = [row["clients"][c]["median"] for c in names]
        p90 = [row["clients"][c]["p90"] for c in names]
        ax.bar(names, med, color=[colors[c] for c in names])
        ax.errorbar(names, med, yerr=[[0] * len(med), [p - m for p, m in zip(p90, med)]], fmt="none",
                    ecolor="black", capsize=3, linewidth=1)
        ax.set_title(f"({row['scenario']}) {row['name']}\n{row['protocol']}", fontsize=9)
        ax.set_ylabel("ms (median, bar to p90)")
        ax.tick_params(axis="x", rotation=60, labelsize=8)
        if max(med) / max(min(med), 1e-9) > 30:
            ax.set_yscale("log")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    log(f"plot: {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--peer-libs", required=True, help="kafka-tools jars (tests/kafka/peer.sh libs)")
    ap.add_argument("--wire-floor", required=True, help="the wire_floor bench binary")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--reps-e", type=int, default=None, help="repetitions of scenario e (default --reps)")
    ap.add_argument("--members", type=int, default=100, help="members of scenario e")
    ap.add_argument("--scenarios", default="abcde")
    ap.add_argument("--classic-e", action="store_true", help="also run scenario e with the classic protocol")
    ap.add_argument("--clients", default=",".join(["floor", "floor+av"] + ALL_CLIENTS))
    ap.add_argument("--topic6", required=True, help="a topic with 6 partitions (a, b, c)")
    ap.add_argument("--topic12", required=True, help="a topic with 12 partitions (d)")
    ap.add_argument("--topic-e", required=True, help="the topic of scenario e")
    ap.add_argument("--partitions-e", type=int, required=True)
    ap.add_argument("--json", default=os.path.join(TARGET, "bench/rejoin.json"))
    ap.add_argument("--png", default=os.path.join(TARGET, "bench/rejoin.png"))
    ap.add_argument("--markdown", default=os.path.join(TARGET, "bench/rejoin.md"))
    args = ap.parse_args()
    args.clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    args.reps_e = args.reps_e or args.reps

    bench = Bench(args, args.bootstrap, args.peer_libs)
    t0 = time.monotonic()
    bench.run()
    table = summarize(bench.samples)
    text = render(table, bench.errors)
    print(text, flush=True)
    machine = {"cpus": os.cpu_count(), "uname": " ".join(os.uname())}
    for path in (args.json, args.png, args.markdown):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"machine": machine, "seconds": round(time.monotonic() - t0, 1), "reps": args.reps,
                   "table": table, "samples": bench.samples, "errors": bench.errors}, f, indent=1)
    with open(args.markdown, "w") as f:
        f.write(text + "\n")
    plot(table, args.png)
    log(f"done in {time.monotonic() - t0:.0f} s; samples: {args.json}")


if __name__ == "__main__":
    main()
