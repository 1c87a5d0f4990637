#!/usr/bin/env bash
# The Kafka compatibility matrix: for each release, start a single-node broker of that
# release (broker.sh start --version), run tests/compat.rs against it (and the classic and
# KIP-848 suites where they apply), stop it, and write what each broker answered as a
# markdown table.
#
#   tests/kafka/matrix.sh [--versions "3.6.2 4.4.0"] [--suites compat,classic,consumer]
#                         [--out FILE] [--state PREFIX]
#
# Defaults: every version of `broker.sh versions` (3.6.2 3.9.2 4.0.2 4.2.2 4.4.0), all three
# suites, bench/results/compat.md (and the raw results next to it, compat.json). One broker
# at a time, in its own state dir target/compat-<version> (never target/kafka-it); the
# per-run results go to target/compat-matrix. --state PREFIX puts both elsewhere:
# PREFIX<version> and PREFIXmatrix (e.g. --state target/mine- for a second matrix next to
# this one). The tests run with KAFKA_IT_DIR set to the version's state dir.
#
# Java peers: the rows of tests/compat.rs that run Kafka's VerifiableConsumer use the jars of
# the same release (tests/kafka/peer.sh libs --version). They are fetched for every version
# before the first broker starts, like the test binaries are built, so that neither counts
# in the test times.
#
# Suites: compat = tests/compat.rs (one table row per test; every release); classic =
# tests/classic.rs (every release); consumer = tests/consumer.rs (releases whose consumer
# protocol this crate speaks, 4.0 on: ConsumerGroupHeartbeat v1). Exit status 1 if any test
# failed; the table is written either way.
set -euo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd -- "$here/../.." && pwd)
cd "$repo"

log() { printf 'matrix.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2; exit 2; }

now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $((t / 1000)); }

read -r -a versions <<<"$("$here/broker.sh" versions | tr '\n' ' ')"
suites=compat,classic,consumer
out=$repo/bench/results/compat.md
state=$repo/target/compat-
while (($#)); do
    case $1 in
        --versions) read -r -a versions <<<"${2:?--versions needs a value}"; shift 2 ;;
        --suites) suites=${2:?--suites needs a value}; shift 2 ;;
        --out) out=${2:?--out needs a value}; shift 2 ;;
        --state) state=${2:?--state needs a value}; shift 2 ;;
        -h | --help) usage ;;
        *) die "unexpected argument $1" ;;
    esac
done
[[ $out == /* ]] || out=$repo/$out
[[ $state == /* ]] || state=$repo/$state
work=${state}matrix
rm -rf "$work"
mkdir -p "$work" "$(dirname "$out")"

# Build the test binaries once, before any broker runs (build time is not test time).
log "building the test binaries"
KAFKA_BROKER_TESTS=1 CI= cargo test --locked --all-features --no-run --test compat --test classic --test consumer \
    >"$work/build.log" 2>&1 || { tail -n 40 "$work/build.log" >&2; die "build failed"; }

# The Java peers' jars of every version, also before any broker runs (the default version's
# go to its state dir's peer-libs, the others to target/java-peer-libs/<version>).
if [[ ,$suites, == *,compat,* ]]; then
    for v in "${versions[@]}"; do
        mkdir -p "$work/$v"
        t0=$(now_ms)
        KAFKA_IT_DIR=$state$v "$here/peer.sh" libs --version "$v" >/dev/null 2>"$work/$v/peer.log" \
            || { cat "$work/$v/peer.log" >&2; die "no Java peer jars for Kafka $v"; }
        log "Kafka $v: Java peer jars ready in $(($(now_ms) - t0)) ms"
    done
fi

# The broker of the version being run, stopped on any exit.
current_dir=""
stop_current() {
    [[ -n $current_dir ]] && "$here/broker.sh" stop --dir "$current_dir" >/dev/null 2>&1 || true
    current_dir=""
}
trap stop_current EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

failed=0
for v in "${versions[@]}"; do
    vdir=$state$v
    res=$work/$v
    mkdir -p "$res"
    log "Kafka $v: starting a single node in $vdir"
    t0=$(now_ms)
    current_dir=$vdir
    if ! bootstrap=$("$here/broker.sh" start --version "$v" --dir "$vdir" 2>"$res/broker.log" | tail -n 1); then
        tail -n 30 "$res/broker.log" >&2
        echo "start_failed=1" >"$res/broker.env"
        stop_current
        failed=1
        continue
    fi
    {
        echo "start_ms=$(($(now_ms) - t0))"
        sed -n 's/^broker\.sh: format: .* in \([0-9.]*\) s$/format_s=\1/p;
                s/^broker\.sh: start-to-ready: \([0-9.]*\) s .*consumer protocol: \([a-z]*\).*/ready_s=\1\nconsumer_protocol=\2/p;
                s/^broker\.sh: node 1: .*RSS \([0-9]*\) MiB$/rss_mib=\1/p;
                s/^broker\.sh: warning: Kafka .* does not define: \(.*\) (node 1)$/unknown_keys=\1/p' "$res/broker.log"
    } >"$res/broker.env"
    grep -E '^(group\.|share\.)' "$vdir/n1/server.properties" >"$res/group-settings.txt" || true
    log "Kafka $v at $bootstrap (ready in $(sed -n 's/^start_ms=//p' "$res/broker.env") ms)"

    IFS=, read -r -a run <<<"$suites"
    for suite in "${run[@]}"; do
        if [[ $suite == consumer ]] && ! grep -q '^consumer_protocol=ga$' "$res/broker.env"; then
            echo "skipped" >"$res/$suite.status"
            continue
        fi
        t1=$(now_ms)
        rc=0
        KAFKA_BOOTSTRAP=$bootstrap KAFKA_BROKER_TESTS=1 KAFKA_VERSION=$v KAFKA_IT_DIR=$vdir COMPAT_REPORT=$res/compat.tsv CI= \
            cargo test --locked --all-features --test "$suite" -- --test-threads=2 \
            >"$res/$suite.log" 2>&1 || rc=$?
        echo "$(($(now_ms) - t1))" >"$res/$suite.ms"
        echo "$rc" >"$res/$suite.status"
        ((rc == 0)) || failed=1
        log "Kafka $v: tests/$suite.rs $(grep -h '^test result' "$res/$suite.log" | tail -n 1 || echo "did not run (exit $rc)")"
    done
    stop_current
done

python3 "$here/matrix_table.py" "$work" "$out" "${versions[@]}"
log "table: $out"
exit "$failed"
