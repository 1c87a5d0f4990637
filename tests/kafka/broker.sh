#!/usr/bin/env bash
# Real Apache Kafka (KRaft) broker for the integration tests, from Maven Central jars
# only: no Kafka tarball, no Docker. See doc/manual/real_broker.md.
#
#   broker.sh start [--nodes 1|3] [--dir DIR] [--version X.Y.Z]
#                                               fresh broker/cluster; prints the bootstrap
#                                               address (127.0.0.1:port[,...]) as the LAST
#                                               line of stdout, all progress on stderr
#   broker.sh stop [--dir DIR]                  SIGTERM, SIGKILL after 20 s, delete data
#   broker.sh bootstrap [--dir DIR]             print the running broker's bootstrap address
#   broker.sh version [--dir DIR]               print the running broker's Kafka version
#   broker.sh pid NODE_ID [--dir DIR]           print the pid of node NODE_ID (1..3)
#   broker.sh start-node NODE_ID [--dir DIR]    restart a stopped/killed node on its existing
#                                               data (no reformat) and version, wait for its
#                                               port
#   broker.sh versions                          print the versions of the compatibility
#                                               matrix (tests/kafka/matrix.sh), default last
#
# --version: the Kafka release to run, default 4.4.0. Checked in the matrix: 3.6.2 (no
# consumer protocol), 3.9.2 (consumer protocol as a preview), 4.0.2, 4.2.2, 4.4.0; any
# release from 3.6 on is accepted and gets the settings of its line (version_settings).
# 3.x runs on log4j 1 (reload4j, tests/kafka/log4j.properties, jars from pom-3x.xml), 4.x
# on log4j2 (log4j2.yaml, jars from pom.xml).
#
# State dir: --dir, else $KAFKA_IT_DIR, else <repo>/target/kafka-it. Layout:
#   libs/          jars of the default version, fetched by Maven from tests/kafka/pom.xml
#                  (kept across runs; refetched when the pom's content changes). Other
#                  versions' jars are shared by all state dirs in
#                  <repo>/target/kafka-it-libs/<version>/ (refetched when their pom changes)
#   nX/            node X: server.properties, data/, out.log (broker console), pid,
#                  format.log
#   bootstrap      bootstrap address of the running broker
#   version        its Kafka version (also what start-node restarts)
#   certs/         single node only: test CA and certificates made by certs.sh (fresh
#                  on every start, kept after stop like the logs)
#   security.env   single node only, while running: the extra listeners and the test
#                  credentials as shell assignments (with-broker.sh exports them):
#                    KAFKA_SASL_SSL_BOOTSTRAP=127.0.0.1:port  SASL_SSL listener
#                    KAFKA_SASL_PLAINTEXT_BOOTSTRAP=127.0.0.1:port  SASL_PLAINTEXT
#                    KAFKA_TLS_CA=DIR/certs/ca.pem     CA that signed the broker cert
#                    KAFKA_TLS_UNTRUSTED_CA=DIR/certs/untrusted-ca.pem  a CA that did not
#                    KAFKA_TLS_CLIENT_CERT=DIR/certs/client.pem  client cert (CA-signed)
#                    KAFKA_TLS_CLIENT_KEY=DIR/certs/client.key   its PKCS#8 PEM key
#                    KAFKA_SASL_USER=alice  KAFKA_SASL_PASSWORD=alice-secret
#                  Both SASL listeners take PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 and
#                  report a 60 s session lifetime (KIP-368). The PLAINTEXT bootstrap
#                  above stays the one printed and used by everything else.
#
# Environment: JAVA (default $JAVA_HOME/bin/java or java; JDK 17+ for the broker),
# MVN (default mvn), KAFKA_IT_DIR, OPENSSL (default openssl; single node only).
# After start, keys of server.properties that the version's KafkaConfig does not define are
# logged as a warning (there should be none: version_settings leaves them out).
set -euo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd -- "$here/../.." && pwd)
JAVA=${JAVA:-${JAVA_HOME:+$JAVA_HOME/bin/}java}
MVN=${MVN:-mvn}

PORT_WAIT_S=90      # every client port must accept connections within this
COORD_WAIT_S=60     # then the group coordinator must answer within this
STOP_WAIT_S=20      # SIGTERM grace period before SIGKILL

# The release the harness runs without --version. Keep in step with pom.xml's kafka.version.
DEFAULT_VERSION=4.4.0
# The compatibility matrix (tests/kafka/matrix.sh): the newest patch release of each line
# that Maven Central serves, oldest first.
MATRIX_VERSIONS=(3.6.2 3.9.2 4.0.2 4.2.2 4.4.0)

# Broker JVM: plain `java` skips bin/kafka-run-class.sh (1 GB heap, G1, JMX). Serial GC
# and C1-only JIT save threads and startup CPU, which is what is scarce on 2 shared cores.
# The log configuration is added per version (version_settings).
broker_jvm_opts=(-Xms128m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1
    -XX:-UsePerfData -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true)
# Short-lived tools (StorageTool, WaitCoordinator).
tool_jvm_opts=(-Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:-UsePerfData
    -Djava.awt.headless=true)

# Test user of the single node's SASL listeners: PLAIN in single.properties.in, SCRAM
# written into the metadata at format time.
SASL_USER=alice
SASL_PASSWORD=alice-secret

log() { printf 'broker.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2; exit 2; }

# Wall clock in milliseconds, and "seconds since $1" with one decimal.
now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $((t / 1000)); }
since() { local d=$(($(now_ms) - $1)); printf '%d.%d' $((d / 1000)) $((d % 1000 / 100)); }

# ---------------------------------------------------------------------------- processes

# True if $1 is a live process (a zombie counts as dead: a node that died while this
# script, its parent, has not reaped it yet is still visible to kill -0).
alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat%% *} != Z ]]
}

# Pid of node $1 if it is running, else fails. The pid file alone is not trusted (pids are
# reused): the process must be kafka.Kafka running this node's server.properties.
node_pid() {
    local nd=$dir/n$1 pid cmd
    [[ -s $nd/pid ]] || return 1
    pid=$(<"$nd/pid")
    [[ $pid =~ ^[0-9]+$ ]] && alive "$pid" || return 1
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
    [[ $cmd == *kafka.Kafka\ "$nd/server.properties"* ]] || return 1
    echo "$pid"
}

# Node ids that have a node dir, in order.
node_ids() {
    local d
    for d in "$dir"/n[0-9]*; do
        [[ -d $d ]] && echo "${d##*/n}"
    done | sort -n
}

# Escape $1 for the replacement side of a sed s|...|...| command.
sed_escape() { printf '%s' "$1" | sed -e 's/[\\|&]/\\&/g'; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# $1 free loopback TCP ports, chosen by the kernel (bind to port 0). All sockets stay open
# until every port is chosen, so the ports are distinct. Another process could still take
# one before the broker binds it; start retries the whole start if a node then fails
# with "Address already in use".
free_ports() {
    python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# Serialise start/stop/start-node on one state dir. fd 9 must not leak into the brokers
# (launch_node closes it), or they would hold the lock for ever.
lock_dir() {
    mkdir -p "$dir"
    exec 9>"$dir/.lock"
    flock 9
}

# ---------------------------------------------------------------------------- versions

# Sets, for the Kafka release $version: its line ($vline = major*100 + minor), the pom and
# the jar dir ($pom, $libs), the log configuration of the broker and of the tools, and the
# server.properties edits of that line ($prop_edits: sed expressions applied to the
# filled-in template). Keys a line does not define, or whose value it rejects, are left
# out or rewritten; checked against the broker's own "KafkaConfig values" dump at start
# (check_config_keys). Sources: apache/kafka KafkaConfig.scala and
# GroupCoordinatorConfig.java of each line.
version_settings() {
    [[ $version =~ ^([0-9]+)\.([0-9]+)\.([0-9]+)$ ]] || die "--version must be X.Y.Z, not '$version'"
    vline=$((BASH_REMATCH[1] * 100 + BASH_REMATCH[2]))
    # 3.5 is the first release whose StorageTool writes SCRAM users at format time; 3.6 the
    # oldest line this harness is checked on.
    ((vline >= 306)) || die "Kafka $version: releases before 3.6 are not supported"
    if [[ $version == "$DEFAULT_VERSION" ]]; then
        libs=$dir/libs          # as before versions existed: per state dir
    else
        libs=$repo/target/kafka-it-libs/$version
    fi
    prop_edits=()
    if ((vline < 400)); then
        # 3.x: log4j 1 (reload4j) behind slf4j 1.7; the binding is slf4j-reload4j.
        pom=$here/pom-3x.xml
        broker_log_opts=("-Dlog4j.configuration=file:$here/log4j.properties" -Dkafka.it.log.level=INFO)
        tool_log_opts=("-Dlog4j.configuration=file:$here/log4j.properties" -Dkafka.it.log.level=ERROR)
        # No share groups (KIP-932 came with 4.0): no share coordinator, no keys.
        prop_edits+=(-e '/^share\.coordinator\./d')
    else
        # 4.x: log4j2 with its SLF4J-1 binding (pom.xml).
        pom=$here/pom.xml
        broker_log_opts=("-Dlog4j2.configurationFile=$here/log4j2.yaml")
        tool_log_opts=()
    fi
    if ((vline < 307)); then
        # 3.6: no consumer protocol. group.coordinator.rebalance.protocols does not exist
        # yet, and ConsumerGroupHeartbeat is an unstable API that is not even advertised;
        # the group.consumer.* timings exist but nothing reads them.
        consumer_protocol=none
        prop_edits+=(-e '/^group\.coordinator\.rebalance\.protocols=/d'
            -e '/^group\.consumer\./d')
    elif ((vline < 400)); then
        # 3.7 (early access) to 3.9 (preview): "consumer" in the list turns on the new group
        # coordinator and ConsumerGroupHeartbeat v0. "streams" is no GroupType there
        # (GroupType.valueOf fails the startup).
        consumer_protocol=preview
        prop_edits+=(-e 's/^group\.coordinator\.rebalance\.protocols=.*/group.coordinator.rebalance.protocols=classic,consumer/')
    elif ((vline < 401)); then
        # 4.0: consumer protocol GA, default classic,consumer; streams groups came in 4.1.
        consumer_protocol=ga
        prop_edits+=(-e 's/^group\.coordinator\.rebalance\.protocols=.*/group.coordinator.rebalance.protocols=classic,consumer/')
    else
        consumer_protocol=ga
    fi
    # group.consumer.assignment.interval.ms (before: assignments computed at once) and
    # group.coordinator.background.threads are new in 4.3 (GroupCoordinatorConfig).
    ((vline >= 403)) || prop_edits+=(-e '/^group\.consumer\.assignment\.interval\.ms=/d'
        -e '/^group\.coordinator\.background\.threads=/d')
    # Streams groups (group.streams.*) came with 4.1; their initial rebalance delay with 4.2,
    # their assignment interval with 4.3 (GroupCoordinatorConfig of each line).
    if ((vline < 401)); then
        prop_edits+=(-e '/^group\.streams\./d')
    else
        ((vline >= 402)) || prop_edits+=(-e '/^group\.streams\.initial\.rebalance\.delay\.ms=/d')
        ((vline >= 403)) || prop_edits+=(-e '/^group\.streams\.assignment\.interval\.ms=/d')
        # The topology description plugin (KIP-1331) came with 4.4.
        ((vline >= 404)) || prop_edits+=(-e '/^group\.streams\.topology\.description\./d')
    fi
}

# Applies $prop_edits to server.properties template output on stdin.
version_props() {
    echo "# Kafka $version (line $vline): template edited by broker.sh version_settings"
    if ((${#prop_edits[@]})); then sed "${prop_edits[@]}"; else cat; fi
}

# ---------------------------------------------------------------------------- jars

# Fetch the broker jars of $version into $libs unless they are there for the current pom.
# The default version keeps its historical stamp (the pom's hash); other versions hash
# the pom and the version. A shared jar dir is locked on its own (several state dirs may
# fetch the same version at once).
ensure_libs() {
    local stamp t0 tmp
    if [[ $version == "$DEFAULT_VERSION" ]]; then
        grep -q "<kafka.version>$DEFAULT_VERSION</kafka.version>" "$pom" \
            || die "DEFAULT_VERSION $DEFAULT_VERSION is not the kafka.version of $pom"
        stamp=$(sha256sum "$pom" | cut -d' ' -f1)
    else
        stamp=$( { cat "$pom"; echo "kafka.version=$version"; } | sha256sum | cut -d' ' -f1)
        mkdir -p "${libs%/*}"
        exec 8>"$libs.lock"
        flock 8
    fi
    if [[ -f $libs/.pom-sha256 && $(<"$libs/.pom-sha256") == "$stamp" ]]; then
        log "jars: Kafka $version cached in $libs"
        exec 8>&-
        return
    fi
    t0=$(now_ms)
    tmp=$libs.tmp
    rm -rf "$tmp"
    if ! "$MVN" -q -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime \
            "-Dkafka.version=$version" "-DoutputDirectory=$tmp" >"$libs.mvn.log" 2>&1; then
        tail -n 40 "$libs.mvn.log" >&2
        exec 8>&-
        die "maven could not fetch the Kafka $version broker jars (full log: $libs.mvn.log)"
    fi
    compgen -G "$tmp/kafka_2.13-$version.jar" >/dev/null \
        || die "no kafka_2.13-$version.jar in $tmp (log: $libs.mvn.log)"
    echo "$stamp" >"$tmp/.pom-sha256"
    rm -rf "$libs"
    mv "$tmp" "$libs"
    exec 8>&-
    local jars=("$libs"/*.jar)
    log "jars: fetched ${#jars[@]} jars of Kafka $version in $(since "$t0") s"
}

# Warns about keys of node $1's server.properties that the broker's KafkaConfig does not
# define (its first "KafkaConfig values:" dump in out.log lists every key it defines).
# Listener-prefixed keys are per-listener overrides, not in the dump.
check_config_keys() {
    local nd=$dir/n$1 unknown
    grep -q 'KafkaConfig values:' "$nd/out.log" || return 0
    unknown=$(awk '
        FNR == NR { if (/KafkaConfig values:/) { on = 1; next }
                    if (on && /^\t/) { sub(/^\t/, ""); sub(/ = .*/, ""); known[$0] = 1; next }
                    if (on) { nextfile } next }
        /^[a-z]/ && !/^listener\.name\./ { k = $0; sub(/=.*/, "", k); if (!(k in known)) print k }
    ' "$nd/out.log" "$nd/server.properties" | sort -u | tr '\n' ' ')
    if [[ -n $unknown ]]; then
        log "warning: Kafka $version does not define: $unknown(node $1)"
        echo "$unknown" >"$nd/unknown-keys"
    else
        rm -f "$nd/unknown-keys"
    fi
}

# ---------------------------------------------------------------------------- nodes

# Start node $1 in the background on its existing config and data: its own session
# (setsid) so it outlives this script and ignores the caller's terminal signals; no
# stdin/stdout/stderr or lock fd shared with the caller (a `$(broker.sh start)` would
# otherwise wait for the broker to exit). The inner bash writes its own pid and then
# execs java, so the pid file holds the java pid.
launch_node() {
    local nd=$dir/n$1
    rm -f "$nd/pid"
    # shellcheck disable=SC2016 # $1, $$ and $@ are the inner bash's
    setsid bash -c 'cd "$1" && echo $$ >pid && shift && exec "$@"' launch "$nd" \
        "$JAVA" "${broker_jvm_opts[@]}" "${broker_log_opts[@]}" "-Dkafka.logs.dir=$nd" -cp "$libs/*" \
        kafka.Kafka "$nd/server.properties" \
        </dev/null >>"$nd/out.log" 2>&1 9>&- &
    local i
    for ((i = 0; i < 100; i++)); do
        [[ -s $nd/pid ]] && return 0
        sleep 0.05
    done
    die "node $1 did not start (no pid file)"
}

# Wait until node $1's client port $2 accepts connections. Returns 1 if the node died
# (tail of its log printed), 3 if it died because a port was taken, 4 on timeout.
wait_port() {
    local n=$1 port=$2 deadline=$3 pid
    pid=$(<"$dir/n$n/pid")
    until port_open "$port"; do
        if ! alive "$pid"; then
            if grep -q 'Address already in use' "$dir/n$n/out.log"; then
                log "node $n: port clash (Address already in use)"
                return 3
            fi
            log "node $n (pid $pid) died during startup; tail of $dir/n$n/out.log:"
            tail -n 60 "$dir/n$n/out.log" >&2
            return 1
        fi
        if (($(now_ms) > deadline)); then
            log "node $n: port $port not open after ${PORT_WAIT_S} s; tail of $dir/n$n/out.log:"
            tail -n 60 "$dir/n$n/out.log" >&2
            return 4
        fi
        sleep 0.2
    done
}

# SIGTERM every running node (a controlled shutdown), SIGKILL what is left after
# STOP_WAIT_S, then delete data, pid files and the bootstrap file. Logs and configs stay
# for post-mortems until the next start.
stop_nodes() {
    local n pid pids=() deadline
    for n in $(node_ids); do
        if pid=$(node_pid "$n"); then
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid")
        fi
    done
    if ((${#pids[@]})); then
        local t0
        t0=$(now_ms)
        deadline=$((t0 + STOP_WAIT_S * 1000))
        for pid in "${pids[@]}"; do
            while alive "$pid" && (($(now_ms) < deadline)); do sleep 0.1; done
        done
        for pid in "${pids[@]}"; do
            if alive "$pid"; then
                log "pid $pid ignored SIGTERM for ${STOP_WAIT_S} s: SIGKILL"
                kill -KILL "$pid" 2>/dev/null || true
            fi
        done
        deadline=$(($(now_ms) + 10000))
        for pid in "${pids[@]}"; do
            while alive "$pid" && (($(now_ms) < deadline)); do sleep 0.05; done
            alive "$pid" && log "warning: pid $pid still there 10 s after SIGKILL"
        done
        log "stopped ${#pids[@]} node(s) in $(since "$t0") s"
    fi
    for n in $(node_ids); do
        rm -rf "$dir/n$n/data" "$dir/n$n/pid"
    done
    rm -f "$dir/bootstrap" "$dir/security.env" "$dir/version"
}

# One attempt at a fresh cluster of $nodes nodes. Returns 3 on a port clash (retry).
start_once() {
    local ports cport=() kport=() voters="" n nd tmpl cid t0 rc
    # Single node only: the SASL_SSL and SASL_PLAINTEXT listeners (single.properties.in).
    local sslport="" saslport="" secure=0 scram=() port
    ((nodes == 1)) && secure=1

    # Fresh state: remove every node dir, also those of a larger earlier cluster.
    for n in $(node_ids); do rm -rf "$dir/n$n"; done
    rm -rf "$dir/certs" "$dir/certs.log"

    # Two ports per node: client (PLAINTEXT) and controller (CONTROLLER); a single node
    # takes two more for its security listeners.
    local nports=$((2 * nodes + 2 * secure))
    read -r -a ports <<<"$(free_ports "$nports")"
    ((${#ports[@]} == nports)) || die "could not pick $nports free ports"
    for ((n = 1; n <= nodes; n++)); do
        cport[n]=${ports[2 * n - 2]}
        kport[n]=${ports[2 * n - 1]}
        voters+="${voters:+,}$n@127.0.0.1:${kport[n]}"
    done
    if ((secure)); then
        sslport=${ports[2]}
        saslport=${ports[3]}
        # Fresh CA and certificates (openssl only, about 0.1 s).
        t0=$(now_ms)
        command -v "${OPENSSL:-openssl}" >/dev/null || die "openssl not found (set OPENSSL)"
        if ! "$here/certs.sh" "$dir/certs" >"$dir/certs.log" 2>&1 9>&-; then
            cat "$dir/certs.log" >&2
            die "could not make the test certificates (log: $dir/certs.log)"
        fi
        log "certs: test CA and certificates in $dir/certs in $(since "$t0") s"
        # SCRAM credentials go into the bootstrap metadata (there is no broker to
        # talk to yet); PLAIN users are in the JAAS config of the template.
        scram=(--add-scram "SCRAM-SHA-256=[name=$SASL_USER,password=$SASL_PASSWORD]"
            --add-scram "SCRAM-SHA-512=[name=$SASL_USER,password=$SASL_PASSWORD]")
    fi

    # One node: offsets RF 1. Three nodes: RF 3 and failover timings (see the templates).
    if ((nodes == 1)); then tmpl=$here/single.properties.in; else tmpl=$here/cluster.properties.in; fi
    for ((n = 1; n <= nodes; n++)); do
        nd=$dir/n$n
        mkdir -p "$nd"
        sed -e "s|@NODE_ID@|$n|g" -e "s|@VOTERS@|$voters|g" \
            -e "s|@CLIENT_PORT@|${cport[n]}|g" -e "s|@CONTROLLER_PORT@|${kport[n]}|g" \
            -e "s|@SASL_SSL_PORT@|$sslport|g" -e "s|@SASL_PLAINTEXT_PORT@|$saslport|g" \
            -e "s|@CERT_DIR@|$(sed_escape "$dir/certs")|g" \
            -e "s|@DATA_DIR@|$(sed_escape "$nd/data")|g" "$tmpl" | version_props >"$nd/server.properties"
        if grep -v '^#' "$nd/server.properties" | grep -q '@[A-Z_]*@'; then
            die "unfilled placeholder in $nd/server.properties"
        fi
    done

    # Format: one cluster id for all nodes (checked against meta.properties at startup),
    # a fresh dir per node (format refuses a formatted one). With controller.quorum.voters
    # set, no --standalone/--initial-controllers. The default metadata.version is the
    # latest production one, which enables group.version=1 (the consumer protocol).
    # Nodes are formatted in parallel (one JVM each).
    t0=$(now_ms)
    cid=$("$JAVA" "${tool_jvm_opts[@]}" "${tool_log_opts[@]}" -cp "$libs/*" kafka.tools.StorageTool random-uuid \
        2>/dev/null | tail -n 1) || true
    [[ $cid =~ ^[A-Za-z0-9_-]{22}$ ]] || die "StorageTool random-uuid gave '$cid'"
    local fpids=()
    for ((n = 1; n <= nodes; n++)); do
        nd=$dir/n$n
        "$JAVA" "${tool_jvm_opts[@]}" "${broker_log_opts[@]}" \
            -cp "$libs/*" kafka.tools.StorageTool format -t "$cid" \
            -c "$nd/server.properties" "${scram[@]}" >"$nd/format.log" 2>&1 &
        fpids[n]=$!
    done
    for ((n = 1; n <= nodes; n++)); do
        if ! wait "${fpids[n]}"; then
            tail -n 40 "$dir/n$n/format.log" >&2
            die "formatting node $n failed (log: $dir/n$n/format.log)"
        fi
    done
    log "format: cluster $cid, $nodes node(s) in $(since "$t0") s"

    # Start all nodes together: a node without a quorum gives up after
    # initial.broker.registration.timeout.ms (60 s). The version file tells start-node
    # (and with-broker.sh) what runs here.
    echo "$version" >"$dir/version"
    t0=$(now_ms)
    for ((n = 1; n <= nodes; n++)); do launch_node "$n"; done

    # A fixed-port acceptor opens its socket only when the broker starts its acceptors,
    # the last startup step, after unfencing (recipe; kafka/network/SocketServer.scala),
    # so an open client port means that node is up. WaitCoordinator checks the rest.
    local deadline=$((t0 + PORT_WAIT_S * 1000))
    for ((n = 1; n <= nodes; n++)); do
        rc=0
        wait_port "$n" "${cport[n]}" "$deadline" || rc=$?
        if ((rc)); then stop_nodes; return "$rc"; fi
    done
    log "ports: all $nodes client port(s) open after $(since "$t0") s"

    # The group coordinator: __consumer_offsets exists, has leaders and is loaded.
    local bootstrap="" t1
    for ((n = 1; n <= nodes; n++)); do bootstrap+="${bootstrap:+,}127.0.0.1:${cport[n]}"; done
    t1=$(now_ms)
    if ! "$JAVA" "${tool_jvm_opts[@]}" "${tool_log_opts[@]}" -cp "$libs/*" "$here/WaitCoordinator.java" \
            "$bootstrap" "$nodes" "$COORD_WAIT_S" 9>&-; then
        for ((n = 1; n <= nodes; n++)); do
            log "tail of $dir/n$n/out.log:"
            tail -n 30 "$dir/n$n/out.log" >&2
        done
        stop_nodes
        die "group coordinator not available after ${COORD_WAIT_S} s"
    fi
    # An open port could in theory belong to a foreign listener that took a just-freed
    # port first; the node then dies on bind. Make sure every node is still there.
    for ((n = 1; n <= nodes; n++)); do
        if ! node_pid "$n" >/dev/null; then
            log "node $n died during startup; tail of $dir/n$n/out.log:"
            tail -n 60 "$dir/n$n/out.log" >&2
            stop_nodes
            grep -q 'Address already in use' "$dir/n$n/out.log" && return 3
            return 1
        fi
    done
    # The security listeners' acceptors start together with the PLAINTEXT one; check
    # anyway, so a test never gets an address that refuses connections.
    if ((secure)); then
        for port in "$sslport" "$saslport"; do
            rc=0
            wait_port 1 "$port" $(($(now_ms) + 10000)) || rc=$?
            if ((rc)); then stop_nodes; return "$rc"; fi
        done
    fi
    log "coordinator: ready after $(since "$t1") s"
    log "start-to-ready: $(since "$t0") s for $nodes node(s) of Kafka $version" \
        "(consumer protocol: $consumer_protocol)"
    for ((n = 1; n <= nodes; n++)); do check_config_keys "$n"; done

    local pid rss
    for ((n = 1; n <= nodes; n++)); do
        pid=$(<"$dir/n$n/pid")
        rss=$(awk '/^VmRSS:/ {printf "%d MiB", $2 / 1024}' "/proc/$pid/status")
        log "node $n: pid $pid, 127.0.0.1:${cport[n]} (controller ${kport[n]}), RSS $rss"
    done

    if ((secure)); then
        local c=$dir/certs
        log "security listeners: SASL_SSL 127.0.0.1:$sslport, SASL_PLAINTEXT 127.0.0.1:$saslport"
        {
            printf '%s=%q\n' \
                KAFKA_SASL_SSL_BOOTSTRAP "127.0.0.1:$sslport" \
                KAFKA_SASL_PLAINTEXT_BOOTSTRAP "127.0.0.1:$saslport" \
                KAFKA_TLS_CA "$c/ca.pem" \
                KAFKA_TLS_UNTRUSTED_CA "$c/untrusted-ca.pem" \
                KAFKA_TLS_CLIENT_CERT "$c/client.pem" \
                KAFKA_TLS_CLIENT_KEY "$c/client.key" \
                KAFKA_SASL_USER "$SASL_USER" \
                KAFKA_SASL_PASSWORD "$SASL_PASSWORD"
        } >"$dir/security.env.tmp"
        mv "$dir/security.env.tmp" "$dir/security.env"
    fi

    echo "$bootstrap" >"$dir/bootstrap.tmp"
    mv "$dir/bootstrap.tmp" "$dir/bootstrap"
    echo "$bootstrap"
}

# ---------------------------------------------------------------------------- commands

cmd_start() {
    [[ $nodes == 1 || $nodes == 3 ]] || die "--nodes must be 1 or 3"
    command -v "$JAVA" >/dev/null || die "java not found (set JAVA or JAVA_HOME)"
    command -v python3 >/dev/null || die "python3 not found (used to pick free ports)"
    lock_dir
    stop_nodes          # fresh state every start, even if one is running
    # Whatever goes wrong from here on (die, or the caller interrupting or killing the
    # start), leave no half-started node behind. Signals become exits so EXIT runs.
    trap 'stop_nodes' EXIT
    trap 'exit 129' HUP
    trap 'exit 130' INT
    trap 'exit 143' TERM
    version=${version_arg:-$DEFAULT_VERSION}
    version_settings
    ensure_libs
    local attempt rc
    for attempt in 1 2 3; do
        rc=0
        start_once || rc=$?
        ((rc == 3)) || break
        log "retrying with new ports (attempt $((attempt + 1)) of 3)"
    done
    ((rc == 0)) || die "broker did not start (state dir: $dir)"
    trap - EXIT HUP INT TERM
}

cmd_stop() {
    [[ -d $dir ]] || return 0
    lock_dir
    stop_nodes
}

cmd_bootstrap() {
    local n
    [[ -s $dir/bootstrap ]] || die "no broker running in $dir"
    for n in $(node_ids); do
        if node_pid "$n" >/dev/null; then
            cat "$dir/bootstrap"
            return 0
        fi
    done
    die "no broker running in $dir (stale $dir/bootstrap)"
}

cmd_version() {
    cmd_bootstrap >/dev/null
    if [[ -s $dir/version ]]; then cat "$dir/version"; else echo "$DEFAULT_VERSION"; fi
}

cmd_pid() {
    [[ $node_arg =~ ^[0-9]+$ ]] || die "usage: broker.sh pid NODE_ID"
    node_pid "$node_arg" || die "node $node_arg is not running in $dir"
}

# Restart one node of a running cluster on its existing data (failover tests: after a
# kill, bring the node back). Its old ports and cluster id stay valid.
cmd_start_node() {
    [[ $node_arg =~ ^[0-9]+$ ]] || die "usage: broker.sh start-node NODE_ID"
    local n=$node_arg nd=$dir/n$node_arg port t0 rc=0
    [[ -f $nd/server.properties && -d $nd/data ]] || die "node $n has no formatted data in $dir"
    lock_dir
    if node_pid "$n" >/dev/null; then die "node $n is already running"; fi
    # The version the node was formatted and started with (a state dir from before
    # versions existed ran the default).
    version=$DEFAULT_VERSION
    [[ -s $dir/version ]] && version=$(<"$dir/version")
    [[ -z $version_arg || $version_arg == "$version" ]] \
        || die "node $n runs Kafka $version, not $version_arg"
    version_settings
    port=$(sed -n 's|^listeners=PLAINTEXT://127.0.0.1:\([0-9]*\),.*|\1|p' "$nd/server.properties")
    t0=$(now_ms)
    echo "---- start-node $(date -Is)" >>"$nd/out.log"
    launch_node "$n"
    wait_port "$n" "$port" $((t0 + PORT_WAIT_S * 1000)) || rc=$?
    ((rc == 0)) || die "node $n did not come back"
    log "node $n: restarted (pid $(<"$nd/pid")) in $(since "$t0") s"
}

# ---------------------------------------------------------------------------- main

(($#)) || usage
cmd=$1
shift
nodes=1
dir=${KAFKA_IT_DIR:-$repo/target/kafka-it}
node_arg=""
version_arg=""
while (($#)); do
    case $1 in
        --version) version_arg=${2:?--version needs a value}; shift 2 ;;
        --version=*) version_arg=${1#*=}; shift ;;
        --nodes) nodes=${2:?--nodes needs a value}; shift 2 ;;
        --nodes=*) nodes=${1#*=}; shift ;;
        --dir) dir=${2:?--dir needs a value}; shift 2 ;;
        --dir=*) dir=${1#*=}; shift ;;
        -h | --help) usage ;;
        -*) die "unknown option $1" ;;
        *) [[ -z $node_arg ]] || die "unexpected argument $1"; node_arg=$1; shift ;;
    esac
done
# Absolute, so that log.dirs, pid checks and java's cwd-independent paths all agree.
[[ $dir == /* ]] || dir=$PWD/$dir
dir=${dir%/}

case $cmd in start | stop | bootstrap | version | versions) [[ -z $node_arg ]] || die "unexpected argument $node_arg" ;; esac
case $cmd in start | start-node) ;; *) [[ -z $version_arg ]] || die "--version is for start and start-node" ;; esac
case $cmd in
    start) cmd_start ;;
    stop) cmd_stop ;;
    bootstrap) cmd_bootstrap ;;
    version) cmd_version ;;
    versions) printf '%s\n' "${MATRIX_VERSIONS[@]}" ;;
    pid) cmd_pid ;;
    start-node) cmd_start_node ;;
    -h | --help | help) usage ;;
    *) die "unknown command '$cmd' (start|stop|bootstrap|version|versions|pid|start-node)" ;;
esac
