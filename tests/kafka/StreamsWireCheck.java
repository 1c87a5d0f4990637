// The Java half of tests/streams_wire.rs: kafka-clients' own generated classes of the
// streams-group messages (StreamsGroupHeartbeat, API key 88; StreamsGroupDescribe, API key 89;
// versions 0 and 1; StreamsGroupTopologyDescriptionUpdate, API key 93, KIP-1331, version 0) with every field set, serialized and parsed as kafka-clients does
// (ObjectSerializationCache + ByteBufferAccessor, no header).
//
//   java -cp "<kafka-clients 4.4.0 and its dependencies>/*" tests/kafka/StreamsWireCheck.java
//
// stdin: lines "NAME VERSION HEX", the Rust encodings of the same samples (NAME is the schema
// name, e.g. StreamsGroupHeartbeatRequest). stdout, one line each:
//   encoded NAME VERSION HEX       this program's encoding of its sample
//   coverage NAME VERSION ok       every field of the version (nested ones too) differs from
//                                  its default, every array has two entries or more, and the
//                                  fields the version does not have are at their defaults;
//                                  else "coverage NAME VERSION missing PATH..."
//   decoded NAME VERSION ok        a stdin line parsed into an object equal to the sample, with
//                                  no byte left over; else "decoded NAME VERSION mismatch WHY"
//   lacking FIELD VERSION WHAT     a field set at a version that does not have it: "refused"
//                                  (UnsupportedVersionException), "dropped" (ignorable: written
//                                  as if at its default) or "written"
//
// The samples mirror `sample()` in tests/streams_wire.rs field for field: change both together.

import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Objects;

import org.apache.kafka.common.message.StreamsGroupDescribeRequestData;
import org.apache.kafka.common.message.StreamsGroupDescribeResponseData;
import org.apache.kafka.common.message.StreamsGroupHeartbeatRequestData;
import org.apache.kafka.common.message.StreamsGroupHeartbeatResponseData;
import org.apache.kafka.common.message.StreamsGroupTopologyDescriptionUpdateRequestData;
import org.apache.kafka.common.message.StreamsGroupTopologyDescriptionUpdateResponseData;
import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.Message;
import org.apache.kafka.common.protocol.ObjectSerializationCache;
import org.apache.kafka.common.protocol.types.RawTaggedField;
import org.apache.kafka.common.protocol.types.Schema;

public class StreamsWireCheck {
    static final String[] NAMES = {
        "StreamsGroupHeartbeatRequest", "StreamsGroupHeartbeatResponse",
        "StreamsGroupDescribeRequest", "StreamsGroupDescribeResponse",
        "StreamsGroupTopologyDescriptionUpdateRequest", "StreamsGroupTopologyDescriptionUpdateResponse",
    };

    /** The highest version of the message `name` (all start at 0). */
    static short maxVersion(String name) {
        return name.startsWith("StreamsGroupTopologyDescriptionUpdate") ? (short) 0 : (short) 1;
    }

    public static void main(String[] args) throws Exception {
        HexFormat hex = HexFormat.of();
        for (String name : NAMES) {
            for (short v = 0; v <= maxVersion(name); v++) {
                ApiMessage m = sample(name, v);
                System.out.println("encoded " + name + " " + v + " " + hex.formatHex(encode(m, v)));
                List<String> missing = new ArrayList<>();
                coverage(name, m, v, missing);
                System.out.println("coverage " + name + " " + v + " "
                    + (missing.isEmpty() ? "ok" : "missing " + String.join(" ", missing)));
            }
        }
        // Fields a version lacks: "refused" (UnsupportedVersionException), "dropped" (written
        // as if at the default: an ignorable field) or "written".
        lacking("StreamsGroupHeartbeatResponse.topologyDescriptionRequired", (short) 0,
            new StreamsGroupHeartbeatResponseData().setTopologyDescriptionRequired(true),
            new StreamsGroupHeartbeatResponseData());
        lacking("StreamsGroupHeartbeatResponse.acceptableRecoveryLagLegacy", (short) 1,
            new StreamsGroupHeartbeatResponseData().setAcceptableRecoveryLagLegacy(1),
            new StreamsGroupHeartbeatResponseData());
        lacking("StreamsGroupHeartbeatResponse.acceptableRecoveryLag", (short) 0,
            new StreamsGroupHeartbeatResponseData().setAcceptableRecoveryLag(5),
            new StreamsGroupHeartbeatResponseData());
        lacking("StreamsGroupDescribeRequest.includeTopologyDescription", (short) 0,
            new StreamsGroupDescribeRequestData().setIncludeTopologyDescription(true),
            new StreamsGroupDescribeRequestData());
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null; ) {
            if (line.isBlank()) continue;
            String[] parts = line.trim().split(" ");
            String name = parts[0];
            short v = Short.parseShort(parts[1]);
            ByteBuffer buf = ByteBuffer.wrap(hex.parseHex(parts.length > 2 ? parts[2] : ""));
            String verdict;
            try {
                ApiMessage decoded = decode(name, buf, v);
                List<String> diffs = new ArrayList<>();
                diff(name, sample(name, v), decoded, diffs);
                if (buf.hasRemaining()) diffs.add(buf.remaining() + " bytes left over");
                verdict = diffs.isEmpty() ? "ok" : "mismatch " + String.join("; ", diffs);
            } catch (RuntimeException e) {
                verdict = "mismatch " + e;
            }
            System.out.println("decoded " + name + " " + v + " " + verdict);
        }
    }

    static void lacking(String field, short v, Message set, Message dflt) {
        String verdict;
        try {
            verdict = java.util.Arrays.equals(encode(set, v), encode(dflt, v)) ? "dropped" : "written";
        } catch (org.apache.kafka.common.errors.UnsupportedVersionException e) {
            verdict = "refused";
        }
        System.out.println("lacking " + field + " " + v + " " + verdict);
    }

    static byte[] encode(Message m, short v) {
        ObjectSerializationCache cache = new ObjectSerializationCache();
        ByteBuffer buf = ByteBuffer.allocate(m.size(cache, v));
        m.write(new ByteBufferAccessor(buf), cache, v);
        if (buf.hasRemaining()) throw new IllegalStateException("size() over-counted");
        return buf.array();
    }

    static ApiMessage decode(String name, ByteBuffer buf, short v) {
        ByteBufferAccessor r = new ByteBufferAccessor(buf);
        switch (name) {
            case "StreamsGroupHeartbeatRequest": return new StreamsGroupHeartbeatRequestData(r, v);
            case "StreamsGroupHeartbeatResponse": return new StreamsGroupHeartbeatResponseData(r, v);
            case "StreamsGroupDescribeRequest": return new StreamsGroupDescribeRequestData(r, v);
            case "StreamsGroupDescribeResponse": return new StreamsGroupDescribeResponseData(r, v);
            case "StreamsGroupTopologyDescriptionUpdateRequest":
                return new StreamsGroupTopologyDescriptionUpdateRequestData(r, v);
            case "StreamsGroupTopologyDescriptionUpdateResponse":
                return new StreamsGroupTopologyDescriptionUpdateResponseData(r, v);
            default: throw new IllegalArgumentException("unknown message " + name);
        }
    }

    static ApiMessage sample(String name, short v) {
        ApiMessage m;
        switch (name) {
            case "StreamsGroupHeartbeatRequest": m = heartbeatRequest(); break;
            case "StreamsGroupHeartbeatResponse": m = heartbeatResponse(v); break;
            case "StreamsGroupDescribeRequest": m = describeRequest(v); break;
            case "StreamsGroupDescribeResponse": m = describeResponse(v); break;
            case "StreamsGroupTopologyDescriptionUpdateRequest": m = updateRequest(); break;
            case "StreamsGroupTopologyDescriptionUpdateResponse": m = updateResponse(); break;
            default: throw new IllegalArgumentException("unknown message " + name);
        }
        // No field of these schemas is tagged: two tags no version knows stand in for one
        // (a one-byte and a two-byte varint tag, one of them empty).
        m.unknownTaggedFields().add(new RawTaggedField(7, new byte[] {1, 2, 3}));
        m.unknownTaggedFields().add(new RawTaggedField(300, new byte[0]));
        return m;
    }

    // ---- StreamsGroupHeartbeatRequest (the same at v0 and v1) ----

    static StreamsGroupHeartbeatRequestData heartbeatRequest() {
        return new StreamsGroupHeartbeatRequestData()
            .setGroupId("streams-app")
            .setMemberId("m-Zx0J1bQpO6Yl2w9sE3bA")
            .setMemberEpoch(7)
            .setEndpointInformationEpoch(3)
            .setInstanceId("instance-1")
            .setRackId("rack-a")
            .setRebalanceTimeoutMs(45_000)
            .setTopology(new StreamsGroupHeartbeatRequestData.Topology()
                .setEpoch(2)
                .setSubtopologies(List.of(hbSubtopology(0), hbSubtopology(1))))
            .setActiveTasks(List.of(hbTasks("0", 0), hbTasks("1", 2)))
            .setStandbyTasks(List.of(hbTasks("0", 4), hbTasks("1", 6)))
            .setWarmupTasks(List.of(hbTasks("0", 8), hbTasks("1", 10)))
            .setProcessId("9f1c2d3e-process")
            .setUserEndpoint(new StreamsGroupHeartbeatRequestData.Endpoint()
                .setHost("streams-host.example").setPort(65_000))
            .setClientTags(List.of(hbKeyValue("zone", "eu-1a"), hbKeyValue("rack", "r7")))
            .setTaskOffsets(List.of(hbOffset("0", 1, 1_000L), hbOffset("1", 2, 1L << 40)))
            .setTaskEndOffsets(List.of(hbOffset("0", 1, 2_000L), hbOffset("1", 2, (1L << 40) + 5)))
            .setShutdownApplication(true);
    }

    static StreamsGroupHeartbeatRequestData.Subtopology hbSubtopology(int i) {
        return new StreamsGroupHeartbeatRequestData.Subtopology()
            .setSubtopologyId("sub-" + i)
            .setSourceTopics(List.of("input-" + i + "-a", "input-" + i + "-b"))
            .setSourceTopicRegex(List.of("in-" + i + "-.*", "other-" + i + "-.+"))
            .setStateChangelogTopics(List.of(hbTopicInfo("app-store-" + i + "-changelog", 1),
                hbTopicInfo("app-agg-" + i + "-changelog", 2)))
            .setRepartitionSinkTopics(List.of("app-rep-" + i + "-a", "app-rep-" + i + "-b"))
            .setRepartitionSourceTopics(List.of(hbTopicInfo("app-rep-" + i + "-src", 3),
                hbTopicInfo("app-rep-" + i + "-src2", 4)))
            .setCopartitionGroups(List.of(
                new StreamsGroupHeartbeatRequestData.CopartitionGroup()
                    .setSourceTopics(List.of((short) 0, (short) 1))
                    .setSourceTopicRegex(List.of((short) 1, (short) 0))
                    .setRepartitionSourceTopics(List.of((short) 0, (short) 1)),
                new StreamsGroupHeartbeatRequestData.CopartitionGroup()
                    .setSourceTopics(List.of((short) 1, (short) 0))
                    .setSourceTopicRegex(List.of((short) 0, (short) 1))
                    .setRepartitionSourceTopics(List.of((short) 1, (short) 0))));
    }

    static StreamsGroupHeartbeatRequestData.TopicInfo hbTopicInfo(String name, int n) {
        return new StreamsGroupHeartbeatRequestData.TopicInfo()
            .setName(name)
            .setPartitions(n * 3)
            .setReplicationFactor((short) n)
            .setTopicConfigs(List.of(hbKeyValue("cleanup.policy", "compact"),
                hbKeyValue("retention.ms", String.valueOf(n * 1000))));
    }

    static StreamsGroupHeartbeatRequestData.KeyValue hbKeyValue(String k, String v) {
        return new StreamsGroupHeartbeatRequestData.KeyValue().setKey(k).setValue(v);
    }

    static StreamsGroupHeartbeatRequestData.TaskIds hbTasks(String sub, int p) {
        return new StreamsGroupHeartbeatRequestData.TaskIds()
            .setSubtopologyId(sub).setPartitions(List.of(p, p + 1));
    }

    static StreamsGroupHeartbeatRequestData.TaskOffset hbOffset(String sub, int p, long offset) {
        return new StreamsGroupHeartbeatRequestData.TaskOffset()
            .setSubtopologyId(sub).setPartition(p).setOffset(offset);
    }

    // ---- StreamsGroupHeartbeatResponse ----

    static StreamsGroupHeartbeatResponseData heartbeatResponse(short v) {
        StreamsGroupHeartbeatResponseData r = new StreamsGroupHeartbeatResponseData()
            .setThrottleTimeMs(11)
            .setErrorCode((short) 25)
            .setErrorMessage("unknown member")
            .setMemberId("m-Zx0J1bQpO6Yl2w9sE3bA")
            .setMemberEpoch(8)
            .setHeartbeatIntervalMs(5_000)
            .setTaskOffsetIntervalMs(60_000)
            .setStatus(List.of(
                new StreamsGroupHeartbeatResponseData.Status()
                    .setStatusCode((byte) 1).setStatusDetail("missing source topics: input-0-a"),
                new StreamsGroupHeartbeatResponseData.Status()
                    .setStatusCode((byte) 6).setStatusDetail("missing client tags: zone")))
            .setActiveTasks(List.of(rsTasks("0", 0), rsTasks("1", 2)))
            .setStandbyTasks(List.of(rsTasks("0", 4), rsTasks("1", 6)))
            .setWarmupTasks(List.of(rsTasks("0", 8), rsTasks("1", 10)))
            .setEndpointInformationEpoch(4)
            .setPartitionsByUserEndpoint(List.of(rsEndpointPartitions("h1.example", 9092, 0),
                rsEndpointPartitions("h2.example", 65_535, 4)));
        if (v == 0) {
            r.setAcceptableRecoveryLagLegacy(10_000);
        } else {
            r.setAcceptableRecoveryLag(1L << 33).setTopologyDescriptionRequired(true);
        }
        return r;
    }

    static StreamsGroupHeartbeatResponseData.TaskIds rsTasks(String sub, int p) {
        return new StreamsGroupHeartbeatResponseData.TaskIds()
            .setSubtopologyId(sub).setPartitions(List.of(p, p + 1));
    }

    static StreamsGroupHeartbeatResponseData.EndpointToPartitions rsEndpointPartitions(
            String host, int port, int p) {
        return new StreamsGroupHeartbeatResponseData.EndpointToPartitions()
            .setUserEndpoint(new StreamsGroupHeartbeatResponseData.Endpoint().setHost(host).setPort(port))
            .setActivePartitions(List.of(rsTopicPartition("input-0-a", p), rsTopicPartition("input-1-a", p + 1)))
            .setStandbyPartitions(List.of(rsTopicPartition("input-0-b", p + 2), rsTopicPartition("input-1-b", p + 3)));
    }

    static StreamsGroupHeartbeatResponseData.TopicPartition rsTopicPartition(String topic, int p) {
        return new StreamsGroupHeartbeatResponseData.TopicPartition()
            .setTopic(topic).setPartitions(List.of(p, p + 10));
    }

    // ---- StreamsGroupDescribeRequest ----

    static StreamsGroupDescribeRequestData describeRequest(short v) {
        StreamsGroupDescribeRequestData r = new StreamsGroupDescribeRequestData()
            .setGroupIds(List.of("streams-app", "other-app"))
            .setIncludeAuthorizedOperations(true);
        if (v >= 1) r.setIncludeTopologyDescription(true);
        return r;
    }

    // ---- StreamsGroupDescribeResponse ----

    static StreamsGroupDescribeResponseData describeResponse(short v) {
        return new StreamsGroupDescribeResponseData()
            .setThrottleTimeMs(12)
            .setGroups(List.of(dsGroup(0, v), dsGroup(1, v)));
    }

    static StreamsGroupDescribeResponseData.DescribedGroup dsGroup(int i, short v) {
        StreamsGroupDescribeResponseData.DescribedGroup g = new StreamsGroupDescribeResponseData.DescribedGroup()
            .setErrorCode((short) (69 + i))
            .setErrorMessage("group error " + i)
            .setGroupId("group-" + i)
            .setGroupState("Stable")
            .setGroupEpoch(5 + i)
            .setAssignmentEpoch(4 + i)
            .setTopology(new StreamsGroupDescribeResponseData.Topology()
                .setEpoch(3 + i)
                .setSubtopologies(List.of(dsSubtopology(0), dsSubtopology(1))))
            .setMembers(List.of(dsMember(2 * i), dsMember(2 * i + 1)))
            .setAuthorizedOperations(3_576 + i);
        if (v >= 1) {
            g.setTopologyDescription(new StreamsGroupDescribeResponseData.TopologyDescription()
                    .setSubtopologies(List.of(dsDescriptionSubtopology(0), dsDescriptionSubtopology(1)))
                    .setGlobalStores(List.of(dsGlobalStore(0), dsGlobalStore(1))))
                .setTopologyDescriptionStatus((byte) 3)
                .setAssignorName("sticky");
        }
        return g;
    }

    static StreamsGroupDescribeResponseData.Subtopology dsSubtopology(int i) {
        return new StreamsGroupDescribeResponseData.Subtopology()
            .setSubtopologyId("sub-" + i)
            .setSourceTopics(List.of("input-" + i + "-a", "input-" + i + "-b"))
            .setRepartitionSinkTopics(List.of("app-rep-" + i + "-a", "app-rep-" + i + "-b"))
            .setStateChangelogTopics(List.of(dsTopicInfo("app-store-" + i + "-changelog", 1),
                dsTopicInfo("app-agg-" + i + "-changelog", 2)))
            .setRepartitionSourceTopics(List.of(dsTopicInfo("app-rep-" + i + "-src", 3),
                dsTopicInfo("app-rep-" + i + "-src2", 4)));
    }

    static StreamsGroupDescribeResponseData.TopicInfo dsTopicInfo(String name, int n) {
        return new StreamsGroupDescribeResponseData.TopicInfo()
            .setName(name)
            .setPartitions(n * 3)
            .setReplicationFactor((short) n)
            .setTopicConfigs(List.of(dsKeyValue("cleanup.policy", "compact"),
                dsKeyValue("retention.ms", String.valueOf(n * 1000))));
    }

    static StreamsGroupDescribeResponseData.KeyValue dsKeyValue(String k, String v) {
        return new StreamsGroupDescribeResponseData.KeyValue().setKey(k).setValue(v);
    }

    static StreamsGroupDescribeResponseData.Member dsMember(int i) {
        return new StreamsGroupDescribeResponseData.Member()
            .setMemberId("member-" + i)
            .setMemberEpoch(10 + i)
            .setInstanceId("instance-" + i)
            .setRackId("rack-" + i)
            .setClientId("client-" + i)
            .setClientHost("/10.0.0." + i)
            .setTopologyEpoch(3)
            .setProcessId("process-" + i)
            .setUserEndpoint(new StreamsGroupDescribeResponseData.Endpoint()
                .setHost("host-" + i).setPort(40_000 + i))
            .setClientTags(List.of(dsKeyValue("zone", "z" + i), dsKeyValue("rack", "r" + i)))
            .setTaskOffsets(List.of(dsOffset("0", i + 1, 100L * i + 1), dsOffset("1", i + 1, 1L << 35)))
            .setTaskEndOffsets(List.of(dsOffset("0", i + 1, 200L * i + 1), dsOffset("1", i + 1, (1L << 35) + 1)))
            .setAssignment(dsAssignment(i))
            .setTargetAssignment(dsAssignment(i + 20))
            .setIsClassic(true);
    }

    static StreamsGroupDescribeResponseData.TaskOffset dsOffset(String sub, int p, long offset) {
        return new StreamsGroupDescribeResponseData.TaskOffset()
            .setSubtopologyId(sub).setPartition(p).setOffset(offset);
    }

    static StreamsGroupDescribeResponseData.Assignment dsAssignment(int p) {
        return new StreamsGroupDescribeResponseData.Assignment()
            .setActiveTasks(List.of(dsTasks("0", p), dsTasks("1", p + 2)))
            .setStandbyTasks(List.of(dsTasks("0", p + 4), dsTasks("1", p + 6)))
            .setWarmupTasks(List.of(dsTasks("0", p + 8), dsTasks("1", p + 10)));
    }

    static StreamsGroupDescribeResponseData.TaskIds dsTasks(String sub, int p) {
        return new StreamsGroupDescribeResponseData.TaskIds()
            .setSubtopologyId(sub).setPartitions(List.of(p, p + 1));
    }

    static StreamsGroupDescribeResponseData.TopologyDescriptionSubtopology dsDescriptionSubtopology(int i) {
        return new StreamsGroupDescribeResponseData.TopologyDescriptionSubtopology()
            .setSubtopologyId("sub-" + i)
            .setNodes(List.of(dsNode("KSTREAM-SOURCE-" + i, (byte) 1), dsNode("KSTREAM-SINK-" + i, (byte) 3)));
    }

    static StreamsGroupDescribeResponseData.TopologyDescriptionGlobalStore dsGlobalStore(int i) {
        return new StreamsGroupDescribeResponseData.TopologyDescriptionGlobalStore()
            .setSource(dsNode("KSTREAM-GLOBAL-SOURCE-" + i, (byte) 1))
            .setProcessor(dsNode("KTABLE-SOURCE-" + i, (byte) 2));
    }

    static StreamsGroupDescribeResponseData.TopologyDescriptionNode dsNode(String name, byte type) {
        return new StreamsGroupDescribeResponseData.TopologyDescriptionNode()
            .setName(name)
            .setNodeType(type)
            .setSourceTopics(List.of(name + "-in-a", name + "-in-b"))
            .setSinkTopic(name + "-out")
            .setStores(List.of(name + "-store-a", name + "-store-b"))
            .setSuccessors(List.of(name + "-next-a", name + "-next-b"));
    }

    // ---- StreamsGroupTopologyDescriptionUpdateRequest / Response (v0) ----

    static StreamsGroupTopologyDescriptionUpdateRequestData updateRequest() {
        return new StreamsGroupTopologyDescriptionUpdateRequestData()
            .setGroupId("streams-app")
            .setMemberId("member-0")
            .setTopologyEpoch(3)
            .setTopologyDescription(new StreamsGroupTopologyDescriptionUpdateRequestData.TopologyDescription()
                .setSubtopologies(List.of(upSubtopology(0), upSubtopology(1)))
                .setGlobalStores(List.of(upGlobalStore(0), upGlobalStore(1))));
    }

    static StreamsGroupTopologyDescriptionUpdateRequestData.TopologyDescriptionSubtopology upSubtopology(int i) {
        return new StreamsGroupTopologyDescriptionUpdateRequestData.TopologyDescriptionSubtopology()
            .setSubtopologyId("sub-" + i)
            .setNodes(List.of(upNode("KSTREAM-SOURCE-" + i, (byte) 1), upNode("KSTREAM-SINK-" + i, (byte) 3)));
    }

    static StreamsGroupTopologyDescriptionUpdateRequestData.TopologyDescriptionGlobalStore upGlobalStore(int i) {
        return new StreamsGroupTopologyDescriptionUpdateRequestData.TopologyDescriptionGlobalStore()
            .setSource(upNode("KSTREAM-GLOBAL-SOURCE-" + i, (byte) 1))
            .setProcessor(upNode("KTABLE-SOURCE-" + i, (byte) 2));
    }

    static StreamsGroupTopologyDescriptionUpdateRequestData.TopologyDescriptionNode upNode(String name, byte type) {
        return new StreamsGroupTopologyDescriptionUpdateRequestData.TopologyDescriptionNode()
            .setName(name)
            .setNodeType(type)
            .setSourceTopics(List.of(name + "-in-a", name + "-in-b"))
            .setSinkTopic(name + "-out")
            .setStores(List.of(name + "-store-a", name + "-store-b"))
            .setSuccessors(List.of(name + "-next-a", name + "-next-b"));
    }

    static StreamsGroupTopologyDescriptionUpdateResponseData updateResponse() {
        return new StreamsGroupTopologyDescriptionUpdateResponseData()
            .setThrottleTimeMs(12)
            .setErrorCode((short) 135)
            .setErrorMessage("the plugin said no");
    }

    // ---- reflection over the generated classes ----

    /** The non-static fields of a generated message class, `_unknownTaggedFields` included. */
    static List<Field> fields(Class<?> c) {
        List<Field> out = new ArrayList<>();
        for (Field f : c.getDeclaredFields()) {
            if (Modifier.isStatic(f.getModifiers())) continue;
            f.setAccessible(true);
            out.add(f);
        }
        return out;
    }

    /** Whether version v of message class c has the field (by its schema, SCHEMAS[v]). */
    static boolean inVersion(Class<?> c, Field f, short v) throws ReflectiveOperationException {
        Schema[] schemas = (Schema[]) c.getField("SCHEMAS").get(null);
        Schema s = v < schemas.length ? schemas[v] : null;
        if (s == null) return false;
        String snake = f.getName().replaceAll("([A-Z])", "_$1").toLowerCase();
        return s.get(snake) != null;
    }

    /**
     * Collects in `missing` the path of every field of `m` (recursively) that the version has but
     * that is at its default value, every array with fewer than two entries, and every field
     * the version does not have that is not at its default.
     */
    static void coverage(String path, Message m, short v, List<String> missing) throws ReflectiveOperationException {
        Class<?> c = m.getClass();
        Object defaults = c.getDeclaredConstructor().newInstance();
        for (Field f : fields(c)) {
            String p = path + "." + f.getName();
            Object value = f.get(m);
            Object dflt = f.get(defaults);
            if (f.getName().equals("_unknownTaggedFields")) {
                if (m instanceof ApiMessage && m.unknownTaggedFields().isEmpty()) missing.add(p);
                continue;
            }
            if (!inVersion(c, f, v)) {
                if (!Objects.equals(value, dflt)) missing.add(p + "(set, but not in v" + v + ")");
                continue;
            }
            if (Objects.equals(value, dflt)) {
                missing.add(p);
            } else if (value instanceof List<?> list) {
                if (list.size() < 2) missing.add(p + "(fewer than 2 entries)");
                for (int i = 0; i < list.size(); i++) {
                    if (list.get(i) instanceof Message e) coverage(p + "[" + i + "]", e, v, missing);
                }
            } else if (value instanceof Message nested) {
                coverage(p, nested, v, missing);
            }
        }
    }

    /** Collects in `diffs` the path and both values of every field where `got` differs from `want`. */
    static void diff(String path, Object want, Object got, List<String> diffs) {
        if (Objects.equals(want, got)) {
            // equals() of the generated classes compares the unknown tagged fields too; say so
            // when they are all that differs (checked below for messages that compare equal).
            if (want instanceof Message w && got instanceof Message g
                    && !Objects.equals(w.unknownTaggedFields(), g.unknownTaggedFields())) {
                diffs.add(path + "._unknownTaggedFields: want " + w.unknownTaggedFields()
                    + ", got " + g.unknownTaggedFields());
            }
            return;
        }
        if (want instanceof Message && got != null && want.getClass() == got.getClass()) {
            for (Field f : fields(want.getClass())) {
                try {
                    diff(path + "." + f.getName(), f.get(want), f.get(got), diffs);
                } catch (IllegalAccessException e) {
                    throw new IllegalStateException(e);
                }
            }
        } else if (want instanceof List<?> w && got instanceof List<?> g && w.size() == g.size()) {
            for (int i = 0; i < w.size(); i++) diff(path + "[" + i + "]", w.get(i), g.get(i), diffs);
        } else {
            diffs.add(path + ": want " + want + ", got " + got);
        }
    }
}
