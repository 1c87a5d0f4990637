#!/usr/bin/env python3
"""VerifiableConsumer-style benchmark peer on librdkafka (the `confluent-kafka` wheel).

Same command line and stdout JSON lines as Kafka's system-test consumer
`org.apache.kafka.tools.VerifiableConsumer` (for the subset the rejoin-latency benchmark
uses), plus `--members N`.

    target/bench-peers/venv/bin/python bench/peers/rdkafka/verifiable_consumer.py \
        --bootstrap-server 127.0.0.1:9092 --topic t --group-id g \
        [--group-protocol classic|consumer] [--group-instance-id ID] \
        [--session-timeout MS] [--consumer.config FILE] [--members N]

Flags:
  --bootstrap-server, --topic, --group-id   required
  --group-protocol classic|consumer         default classic; `consumer` sets librdkafka's
                                            group.protocol=consumer (KIP-848, librdkafka >= 2.4;
                                            the broker's default assignor is used)
  --group-instance-id ID                    static membership (group.instance.id); with
                                            --members N > 1 member i gets "ID-i"
  --session-timeout MS                      session.timeout.ms, classic protocol only
  --consumer.config FILE / --command-config FILE
                                            Java .properties key=value lines passed through
                                            as librdkafka configuration (librdkafka uses the
                                            Kafka names for the common keys); the Java-only
                                            key.deserializer / value.deserializer are dropped.
                                            The command line wins over the file.
  --members N                               N members of the group in this process (one
                                            librdkafka Consumer each, each polled by its own
                                            thread); every line then carries "member": i
  --max-messages, --reset-policy, --verbose, --enable-autocommit, --close-timeout,
  --assignment-strategy, --group-remote-assignor
                                            accepted for compatibility; only --reset-policy and
                                            --group-remote-assignor have an effect, records
                                            are polled and dropped

Events (one JSON object per line, flushed; "timestamp" is ms since the epoch):
  startup_complete      once, right before the first Consumer is created (librdkafka connects
                        to the bootstrap brokers on creation)
  partitions_assigned   from on_assign: {"partitions":[{"topic","partition"}]} (with the
                        consumer protocol / cooperative assignors only the added partitions)
  partitions_revoked    from on_revoke and on_lost (lost reported as revoked, like Java's
                        default onPartitionsLost)
  shutdown_requested    SIGTERM / SIGINT received
  shutdown_complete     after every Consumer closed (librdkafka's default close: a dynamic
                        member leaves the group, a static one does not in the classic protocol
                        and leaves with epoch -2 in the consumer protocol)

Auto commit is off (enable.auto.commit=false). Exit status 0 after a close, 1 for argument or
configuration errors.
"""

import json
import signal
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaException

_out_lock = threading.Lock()


def now_ms():
    return time.time_ns() // 1_000_000


def emit(name, member=None, **fields):
    obj = {"timestamp": now_ms(), "name": name}
    if member is not None:
        obj["member"] = member
    obj.update(fields)
    line = json.dumps(obj, separators=(",", ":"))
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def die(msg):
    sys.stderr.write("verifiable_consumer.py: error: %s\n" % msg)
    sys.exit(1)


VALUED = {
    "--bootstrap-server", "--topic", "--group-id", "--group-protocol", "--group-instance-id",
    "--session-timeout", "--consumer.config", "--command-config", "--members", "--max-messages",
    "--reset-policy", "--close-timeout", "--assignment-strategy", "--group-remote-assignor",
}
FLAGS = {"--verbose", "--enable-autocommit"}


def parse_args(argv):
    values = {}
    it = iter(argv)
    for arg in it:
        if arg.startswith("--") and "=" in arg:
            flag, value = arg.split("=", 1)
        else:
            flag, value = arg, None
        if flag in ("-h", "--help"):
            print(__doc__)
            sys.exit(0)
        if flag in FLAGS:
            values[flag] = True
            continue
        if flag not in VALUED:
            die("unrecognized argument %r" % arg)
        if value is None:
            value = next(it, None)
            if value is None:
                die("argument %s: expected one argument" % flag)
        values[flag] = value
    for req in ("--bootstrap-server", "--topic", "--group-id"):
        if req not in values:
            die("argument %s is required" % req)
    return values


def read_properties(path):
    props = {}
    try:
        with open(path, encoding="utf-8") as f:
            for raw in f:
                line = raw.strip()
                if not line or line[0] in "#!":
                    continue
                sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
                if sep < 0:
                    key, value = line, ""
                else:
                    key, value = line[:sep].strip(), line[sep + 1:].strip()
                props[key] = value
    except OSError as e:
        die("cannot read %s: %s" % (path, e))
    return props


def tps(partitions):
    return [{"topic": p.topic, "partition": p.partition} for p in partitions]


def main():
    args = parse_args(sys.argv[1:])
    protocol = args.get("--group-protocol", "classic").lower()
    if protocol not in ("classic", "consumer"):
        die("argument --group-protocol: %r is not one of classic, consumer" % protocol)
    try:
        members = int(args.get("--members", "1"))
    except ValueError:
        die("argument --members: not an integer")
    if members < 1:
        die("argument --members: must be at least 1")

    conf = {}
    for key in ("--consumer.config", "--command-config"):
        if key in args:
            conf.update(read_properties(args[key]))
    for key in ("key.deserializer", "value.deserializer"):
        conf.pop(key, None)
    conf.update({
        "bootstrap.servers": args["--bootstrap-server"],
        "group.id": args["--group-id"],
        "enable.auto.commit": "false",
        "auto.offset.reset": args.get("--reset-policy", "earliest").lower(),
    })
    if protocol == "consumer":
        conf["group.protocol"] = "consumer"
        if "--session-timeout" in args:
            die("--session-timeout is not supported with --group-protocol consumer")
        if "--group-remote-assignor" in args:
            conf["group.remote.assignor"] = args["--group-remote-assignor"]
    else:
        conf["group.protocol"] = "classic"
        if "--session-timeout" in args:
            conf["session.timeout.ms"] = args["--session-timeout"]
    instance_id = args.get("--group-instance-id")
    topic = args["--topic"]

    stop = threading.Event()

    def on_signal(_signum, _frame):
        if not stop.is_set():
            emit("shutdown_requested")
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    tag = (lambda i: i) if members > 1 else (lambda i: None)
    consumers = []
    # librdkafka connects to the bootstrap brokers as soon as a Consumer exists: startup_complete
    # goes out before the first one is created, so the time runs from before its first request.
    emit("startup_complete")
    for i in range(members):
        c = dict(conf)
        if instance_id is not None:
            c["group.instance.id"] = instance_id if members == 1 else "%s-%d" % (instance_id, i)
        try:
            consumer = Consumer(c)
        except KafkaException as e:
            die("configuration: %s" % e)

        def on_assign(_c, parts, m=tag(i)):
            emit("partitions_assigned", m, partitions=tps(parts))

        def on_revoke(_c, parts, m=tag(i)):
            emit("partitions_revoked", m, partitions=tps(parts))

        consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
        consumers.append(consumer)

    def run(consumer):
        # poll() serves the rebalance callbacks; records are dropped. It releases the GIL.
        while not stop.is_set():
            try:
                consumer.poll(0.1)
            except KafkaException as e:
                sys.stderr.write("poll: %s\n" % e)
        consumer.close()

    threads = [threading.Thread(target=run, args=(c,), daemon=True) for c in consumers]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        # Short joins so the main thread keeps running the Python signal handlers.
        for t in threads:
            t.join(0.1)
    emit("shutdown_complete")
    return 0


if __name__ == "__main__":
    sys.exit(main())
