#!/usr/bin/env bash
# Shows that a change left the simulated behaviour alone: runs tests/sim_random.rs's
# `replay_one_seed` for the same seeds at two revisions and compares the printed traces (every
# request, answer, timer and event of the members and the simulated coordinator, in order).
#
#   tests/sim_trace_diff.sh BASE [SEEDS] [OFFSET]    BASE: a git revision; compared with the
#                                                    working tree. SEEDS default 2000.
#   SIM_JAVA_POLICY=1 tests/sim_trace_diff.sh ...    the same with the Java reset policy
#   SIM_SUITE=streams tests/sim_trace_diff.sh ...    the streams schedules instead
#                                                    (tests/sim_streams_random.rs,
#                                                    `replay_one_streams_seed`)
#
# Prints one line per seed whose traces differ (and keeps both traces under
# target/sim-trace-diff/), then "N seeds, D differ". Exit status 1 when any differ.
set -euo pipefail

base=${1:?usage: tests/sim_trace_diff.sh BASE [SEEDS] [OFFSET]}
seeds=${2:-2000}
offset=${3:-0}
repo=$(git rev-parse --show-toplevel)
case ${SIM_SUITE:-consumer} in
    consumer) suite=sim_random replay=replay_one_seed ;;
    streams) suite=sim_streams_random replay=replay_one_streams_seed ;;
    *) echo "SIM_SUITE must be consumer or streams" >&2; exit 2 ;;
esac
out=$repo/target/sim-trace-diff/$suite
mkdir -p "$out"

# The test binary of the suite built from the tree at $1 (release: the schedules run
# faster than they build).
binary() {
    (cd "$1" && CARGO_TARGET_DIR="$repo/target/sim-trace-diff/build" \
        cargo test --release --all-features --test "$suite" --no-run \
        --message-format json 2>/dev/null) |
        SUITE=$suite python3 -c 'import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == os.environ["SUITE"]:
        print(m["executable"])'
}

tree=$(mktemp -d)
trap 'git -C "$repo" worktree remove --force "$tree" >/dev/null 2>&1 || true' EXIT
git -C "$repo" worktree add --detach --force "$tree" "$base" >/dev/null
echo "building $base ..." >&2
before=$(binary "$tree")
cp "$before" "$out/before"
echo "building the working tree ..." >&2
# Both trees build into one target directory, and cargo judges a path crate fresh by file times:
# a working tree whose files are older than the base build could reuse the base binary. Its
# sources are touched so that it never does.
find "$repo/src" "$repo/tests" "$repo/Cargo.toml" $([[ -d $repo/core ]] && echo "$repo/core") -type f -exec touch {} +
after=$(binary "$repo")
cmp -s "$out/before" "$after" && echo "warning: the two binaries are identical" >&2
cp "$after" "$out/after"

trace() {
    SIM_SEED_OFFSET=$2 "$1" "$replay" --ignored --nocapture --exact --test-threads 1 2>&1 |
        sed -e '/^running 1 test/d' -e '/^test result:/d' -e "/^test $replay/d" \
            -e 's/finished in [0-9.]*s//'
}

differ=0
for ((s = offset; s < offset + seeds; s++)); do
    a=$(trace "$out/before" "$s")
    b=$(trace "$out/after" "$s")
    if [[ "$a" != "$b" ]]; then
        differ=$((differ + 1))
        printf '%s\n' "$a" >"$out/seed-$s.before"
        printf '%s\n' "$b" >"$out/seed-$s.after"
        echo "seed $s differs: diff $out/seed-$s.before $out/seed-$s.after"
    fi
done
echo "$seeds seeds, $differ differ (base $base, suite $suite, java policy ${SIM_JAVA_POLICY:-0})"
[[ $differ -eq 0 ]]
