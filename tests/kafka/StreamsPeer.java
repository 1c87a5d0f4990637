// A real Kafka Streams 4.4 application in a streams group (KIP-1071, group.protocol=streams),
// and the admin calls the streams tests need. Used by tests/common/streams_peer.rs.
//
//   java -cp "<peer.sh streams-libs dir>/*" tests/kafka/StreamsPeer.java run ARGS
//   java -cp "<peer.sh streams-libs dir>/*" tests/kafka/StreamsPeer.java admin ARGS
//
// (JDK 17 single-file source launcher.)
//
// run --bootstrap B --group G --input T --output T [--instance-id ID] [--standby N]
//     [--state-dir DIR] [--threads N] [--leave]
//   A KafkaStreams with application.id G and this topology of two subtopologies:
//     subtopology 0: T -> selectKey(value) -> G-rekey-repartition
//     subtopology 1: G-rekey-repartition -> count (store "counts", changelog
//                    G-counts-changelog) -> T (output)
//   --instance-id: group.instance.id (static membership; Kafka Streams suffixes it with
//   "-<thread index>", e.g. ID-1). --standby: num.standby.replicas, which the streams protocol
//   ignores (the group config streams.num.standby.replicas applies; Kafka Streams logs a
//   warning). --leave: close with LEAVE_GROUP (else DEFAULT: a static member stays, -2).
//   stdout: one JSON object per line, whenever the status changes and at least every second:
//     {"name":"status","state":"RUNNING","process_id":"<uuid>","instance_id":..,
//      "threads":N,"active":["0_0","1_2"],"standby":["1_0"]}
//   then, when stdin closes, {"name":"closing"}, close(), {"name":"closed"} and exit 0.
//   {"name":"error","message":..} on an uncaught exception (the client shuts down).
//
// admin --bootstrap B --group G set-config KEY=VALUE...
//   incrementalAlterConfigs GROUP G, SET each KEY (group configs: streams.num.standby.replicas,
//   streams.session.timeout.ms, streams.heartbeat.interval.ms, ...). The broker takes them
//   before the group exists. stdout: {"name":"set_config","ok":true} or
//   {"name":"set_config","ok":false,"error":..} (e.g. InvalidConfigurationException).
// admin --bootstrap B --group G set-standby N
//   set-config streams.num.standby.replicas=N.
// admin --bootstrap B --group G describe
//   describeStreamsGroups(G). stdout: {"name":"describe","ok":true,"group":{...}} with
//   group_epoch, target_assignment_epoch, topology_epoch, state, subtopologies (source,
//   repartition sink / source and changelog topics with partitions, replication factor and
//   configs) and members (member_id, member_epoch, instance_id, process_id, client_id,
//   topology_epoch, assignment and target_assignment as {"active":["0_1",..],..});
//   or {"name":"describe","ok":false,"error":..} (e.g. GroupIdNotFoundException).
// admin --bootstrap B --group G create-topic NAME PARTITIONS
//   createTopics (replication factor 1; --group is ignored). stdout: {"name":"create_topic",..}
//
// Exit status: 0 done, 1 failure, 2 bad usage.

import java.io.IOException;
import java.io.InputStream;
import java.lang.reflect.Field;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.StreamsGroupDescription;
import org.apache.kafka.clients.admin.StreamsGroupMemberAssignment;
import org.apache.kafka.clients.admin.StreamsGroupMemberDescription;
import org.apache.kafka.clients.admin.StreamsGroupSubtopologyDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TaskMetadata;
import org.apache.kafka.streams.ThreadMetadata;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

public class StreamsPeer {
    static final Object OUT = new Object();

    public static void main(String[] args) throws Exception {
        if (args.length < 1) usage("no mode");
        Map<String, String> opts = new HashMap<>();
        List<String> rest = new ArrayList<>();
        for (int i = 1; i < args.length; i++) {
            String a = args[i];
            if (a.equals("--leave")) {
                opts.put("leave", "true");
            } else if (a.startsWith("--")) {
                if (i + 1 >= args.length) usage(a + " needs a value");
                opts.put(a.substring(2), args[++i]);
            } else {
                rest.add(a);
            }
        }
        switch (args[0]) {
            case "run" -> run(opts);
            case "admin" -> System.exit(admin(opts, rest));
            default -> usage("unknown mode " + args[0]);
        }
    }

    static void usage(String why) {
        System.err.println("StreamsPeer: " + why + " (see the head of StreamsPeer.java)");
        System.exit(2);
    }

    static String need(Map<String, String> opts, String key) {
        String v = opts.get(key);
        if (v == null) usage("--" + key + " is required");
        return v;
    }

    static void emit(String line) {
        synchronized (OUT) {
            System.out.println(line);
            System.out.flush();
        }
    }

    // ------------------------------------------------------------------------ run

    static void run(Map<String, String> opts) throws Exception {
        String group = need(opts, "group");
        String input = need(opts, "input");
        String output = need(opts, "output");
        String instanceId = opts.get("instance-id");
        Path stateDir = opts.containsKey("state-dir")
            ? Path.of(opts.get("state-dir"))
            : Files.createTempDirectory("streams-peer-");

        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, group);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, need(opts, "bootstrap"));
        p.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, "streams");
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, opts.getOrDefault("threads", "1"));
        p.put(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG, opts.getOrDefault("standby", "0"));
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "200");
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, "0");
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        if (instanceId != null) {
            p.put(StreamsConfig.consumerPrefix(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG), instanceId);
        }

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
            .selectKey((k, v) -> v)
            .groupByKey(Grouped.with("rekey", Serdes.String(), Serdes.String()))
            .count(Materialized.as("counts"))
            .toStream()
            .to(output, Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        String processId = processId(streams);
        streams.setUncaughtExceptionHandler(e -> {
            emit("{\"name\":\"error\",\"message\":" + str(String.valueOf(e)) + "}");
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
                .StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });

        // stdin closed (the test dropped it, or died): close and exit.
        Thread stdinWatch = new Thread(() -> {
            try {
                InputStream in = System.in;
                byte[] buf = new byte[256];
                while (in.read(buf) >= 0) { }
            } catch (IOException ignored) { }
            emit("{\"name\":\"closing\"}");
            CloseOptions close = CloseOptions.timeout(Duration.ofSeconds(30));
            if (opts.containsKey("leave")) {
                close = close.withGroupMembershipOperation(CloseOptions.GroupMembershipOperation.LEAVE_GROUP);
            }
            boolean clean = streams.close(close);
            emit("{\"name\":\"closed\",\"clean\":" + clean + "}");
            System.exit(0);
        }, "stdin-watch");
        stdinWatch.setDaemon(true);

        streams.start();
        stdinWatch.start();

        String last = null;
        long lastAt = 0;
        while (true) {
            String line = status(streams, processId, instanceId);
            long now = System.nanoTime();
            if (!line.equals(last) || now - lastAt >= TimeUnit.SECONDS.toNanos(1)) {
                emit(line);
                last = line;
                lastAt = now;
            }
            Thread.sleep(50);
        }
    }

    /// KafkaStreams keeps its process id (the one it sends as ProcessId) in a private field.
    static String processId(KafkaStreams streams) {
        try {
            Field f = KafkaStreams.class.getDeclaredField("processId");
            f.setAccessible(true);
            return String.valueOf(f.get(streams));
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null;
        }
    }

    static String status(KafkaStreams streams, String processId, String instanceId) {
        TreeSet<String> active = new TreeSet<>();
        TreeSet<String> standby = new TreeSet<>();
        int threads = 0;
        try {
            for (ThreadMetadata t : streams.metadataForLocalThreads()) {
                threads++;
                for (TaskMetadata m : t.activeTasks()) active.add(m.taskId().toString());
                for (TaskMetadata m : t.standbyTasks()) standby.add(m.taskId().toString());
            }
        } catch (RuntimeException e) {
            // not running (yet / any more): no tasks
        }
        return "{\"name\":\"status\",\"state\":" + str(streams.state().name())
            + ",\"process_id\":" + str(processId)
            + ",\"instance_id\":" + str(instanceId)
            + ",\"threads\":" + threads
            + ",\"active\":" + strs(active)
            + ",\"standby\":" + strs(standby) + "}";
    }

    // ------------------------------------------------------------------------ admin

    static int admin(Map<String, String> opts, List<String> rest) throws Exception {
        String group = need(opts, "group");
        if (rest.isEmpty()) usage("admin needs a command");
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, need(opts, "bootstrap"));
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        try (Admin admin = Admin.create(p)) {
            switch (rest.get(0)) {
                case "set-standby", "set-config" -> {
                    // set-standby N is set-config streams.num.standby.replicas=N.
                    List<String> pairs = rest.get(0).equals("set-standby")
                        ? List.of("streams.num.standby.replicas=" + (rest.size() == 2 ? rest.get(1) : ""))
                        : rest.subList(1, rest.size());
                    if (pairs.isEmpty() || (rest.get(0).equals("set-standby") && rest.size() != 2)) {
                        usage("set-standby N | set-config KEY=VALUE...");
                    }
                    List<AlterConfigOp> ops = new ArrayList<>();
                    for (String kv : pairs) {
                        int eq = kv.indexOf('=');
                        if (eq <= 0) usage("set-config KEY=VALUE, not " + kv);
                        ops.add(new AlterConfigOp(
                            new ConfigEntry(kv.substring(0, eq), kv.substring(eq + 1)), AlterConfigOp.OpType.SET));
                    }
                    ConfigResource r = new ConfigResource(ConfigResource.Type.GROUP, group);
                    try {
                        admin.incrementalAlterConfigs(Map.of(r, ops)).all().get();
                        emit("{\"name\":\"set_config\",\"ok\":true}");
                    } catch (ExecutionException e) {
                        emit("{\"name\":\"set_config\",\"ok\":false,\"error\":" + str(String.valueOf(e.getCause())) + "}");
                        return 1;
                    }
                }
                case "describe" -> {
                    try {
                        StreamsGroupDescription d = admin.describeStreamsGroups(List.of(group))
                            .describedGroups().get(group).get();
                        emit("{\"name\":\"describe\",\"ok\":true,\"group\":" + describe(d) + "}");
                    } catch (ExecutionException e) {
                        emit("{\"name\":\"describe\",\"ok\":false,\"error\":" + str(String.valueOf(e.getCause())) + "}");
                        return 1;
                    }
                }
                case "create-topic" -> {
                    if (rest.size() != 3) usage("create-topic NAME PARTITIONS");
                    try {
                        admin.createTopics(List.of(new NewTopic(rest.get(1), Integer.parseInt(rest.get(2)), (short) 1)))
                            .all().get();
                        emit("{\"name\":\"create_topic\",\"ok\":true}");
                    } catch (ExecutionException e) {
                        emit("{\"name\":\"create_topic\",\"ok\":false,\"error\":" + str(String.valueOf(e.getCause())) + "}");
                        return 1;
                    }
                }
                default -> usage("unknown admin command " + rest.get(0));
            }
        }
        return 0;
    }

    static String describe(StreamsGroupDescription d) {
        StringBuilder s = new StringBuilder("{");
        s.append("\"group_id\":").append(str(d.groupId()));
        s.append(",\"state\":").append(str(String.valueOf(d.groupState())));
        s.append(",\"group_epoch\":").append(d.groupEpoch());
        s.append(",\"target_assignment_epoch\":").append(d.targetAssignmentEpoch());
        s.append(",\"topology_epoch\":").append(d.topologyEpoch());
        s.append(",\"subtopologies\":[");
        String sep = "";
        for (StreamsGroupSubtopologyDescription t : d.subtopologies()) {
            s.append(sep).append("{\"subtopology_id\":").append(str(t.subtopologyId()));
            s.append(",\"source_topics\":").append(strs(t.sourceTopics()));
            s.append(",\"repartition_sink_topics\":").append(strs(t.repartitionSinkTopics()));
            s.append(",\"repartition_source_topics\":").append(topics(t.repartitionSourceTopics()));
            s.append(",\"state_changelog_topics\":").append(topics(t.stateChangelogTopics()));
            s.append("}");
            sep = ",";
        }
        s.append("],\"members\":[");
        sep = "";
        for (StreamsGroupMemberDescription m : d.members()) {
            s.append(sep).append("{\"member_id\":").append(str(m.memberId()));
            s.append(",\"member_epoch\":").append(m.memberEpoch());
            s.append(",\"instance_id\":").append(str(m.instanceId().orElse(null)));
            s.append(",\"process_id\":").append(str(m.processId()));
            s.append(",\"client_id\":").append(str(m.clientId()));
            s.append(",\"topology_epoch\":").append(m.topologyEpoch());
            s.append(",\"is_classic\":").append(m.isClassic());
            s.append(",\"assignment\":").append(assignment(m.assignment()));
            s.append(",\"target_assignment\":").append(assignment(m.targetAssignment()));
            s.append("}");
            sep = ",";
        }
        return s.append("]}").toString();
    }

    static String topics(Map<String, StreamsGroupSubtopologyDescription.TopicInfo> topics) {
        StringBuilder s = new StringBuilder("[");
        String sep = "";
        for (var e : new java.util.TreeMap<>(topics).entrySet()) {
            var info = e.getValue();
            s.append(sep).append("{\"name\":").append(str(e.getKey()));
            s.append(",\"partitions\":").append(info.partitions());
            s.append(",\"replication_factor\":").append(info.replicationFactor());
            s.append(",\"configs\":{");
            String csep = "";
            for (var c : new java.util.TreeMap<>(info.topicConfigs()).entrySet()) {
                s.append(csep).append(str(c.getKey())).append(":").append(str(c.getValue()));
                csep = ",";
            }
            s.append("}}");
            sep = ",";
        }
        return s.append("]").toString();
    }

    static String assignment(StreamsGroupMemberAssignment a) {
        return "{\"active\":" + tasks(a.activeTasks())
            + ",\"standby\":" + tasks(a.standbyTasks())
            + ",\"warmup\":" + tasks(a.warmupTasks()) + "}";
    }

    /// Task ids as Kafka Streams prints them: "<subtopology>_<partition>".
    static String tasks(List<StreamsGroupMemberAssignment.TaskIds> ids) {
        TreeSet<String> out = new TreeSet<>();
        for (var t : ids) for (int partition : t.partitions()) out.add(t.subtopologyId() + "_" + partition);
        return strs(out);
    }

    // ------------------------------------------------------------------------ JSON

    static String strs(Collection<String> xs) {
        StringBuilder s = new StringBuilder("[");
        String sep = "";
        for (String x : xs) {
            s.append(sep).append(str(x));
            sep = ",";
        }
        return s.append("]").toString();
    }

    static String str(String x) {
        if (x == null) return "null";
        StringBuilder s = new StringBuilder("\"");
        for (char c : x.toCharArray()) {
            switch (c) {
                case '"' -> s.append("\\\"");
                case '\\' -> s.append("\\\\");
                case '\n' -> s.append("\\n");
                case '\r' -> s.append("\\r");
                case '\t' -> s.append("\\t");
                default -> {
                    if (c < 0x20) s.append(String.format("\\u%04x", (int) c));
                    else s.append(c);
                }
            }
        }
        return s.append('"').toString();
    }
}
