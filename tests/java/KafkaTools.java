// Kafka's command-line tools and its Java AdminClient's read calls, many in one JVM (a JVM start
// costs about 2 s, so tests/kafka_tools.py runs a module's tool runs here in one batch: the tools
// yardstick's per side, kafka-dump-log's diffs).
//
//   java -cp 'tools/kafka/lib/*' tests/java/KafkaTools.java < runs.tsv
//
// Each stdin line is one run: NAME, MAIN CLASS, the tool's stdin ("-" for none; "\n" escapes a
// newline), then its arguments, tab-separated. Runs go one after the other; each run's stdout and
// stderr are captured, and its exit (Kafka's Exit.exit, trapped) recorded. The output is one JSON
// object per run: {"name", "code", "stdout", "stderr"}. MAIN CLASS "AdminReads" is the read calls
// below, with arguments BOOTSTRAP PREFIX GROUP...

import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.stream.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.utils.internals.Exit;

public class KafkaTools {
    static final class Exited extends RuntimeException {
        final int code;
        Exited(int code) { super(null, null, false, false); this.code = code; }
    }

    static Integer exitCode;

    static final class Switch extends OutputStream {
        OutputStream target = OutputStream.nullOutputStream();
        @Override public void write(int b) throws IOException { target.write(b); }
        @Override public void write(byte[] b, int off, int len) throws IOException { target.write(b, off, len); }
        @Override public void flush() throws IOException { target.flush(); }
    }

    static final Switch outSwitch = new Switch(), errSwitch = new Switch();

    public static void main(String[] ignored) throws Exception {
        PrintStream realOut = System.out;
        InputStream realIn = System.in;
        List<String> lines = new BufferedReader(new InputStreamReader(realIn, StandardCharsets.UTF_8)).lines().toList();
        // A tool may catch the trap in its own catch-all: its first exit code is the one it meant.
        Exit.setExitProcedure((code, message) -> {
            if (exitCode == null) exitCode = code;
            throw new Exited(code);
        });
        // One System.out and System.err for every run, switched from run to run: Scala's Console
        // (the tools in Kafka's core, kafka-dump-log) keeps the System.out it first saw.
        System.setOut(new PrintStream(outSwitch, true, StandardCharsets.UTF_8));
        System.setErr(new PrintStream(errSwitch, true, StandardCharsets.UTF_8));
        for (String line : lines) {
            if (line.isBlank()) continue;
            String[] f = line.split("\t", -1);
            String name = f[0], main = f[1], input = f[2];
            String[] args = Arrays.copyOfRange(f, 3, f.length);
            ByteArrayOutputStream out = new ByteArrayOutputStream(), err = new ByteArrayOutputStream();
            int code = 0;
            exitCode = null;
            outSwitch.target = out;
            errSwitch.target = err;
            System.setIn(new ByteArrayInputStream(input.equals("-") ? new byte[0] : input.replace("\\n", "\n").getBytes(StandardCharsets.UTF_8)));
            try {
                if (main.equals("AdminReads")) AdminReads.run(args);
                else Class.forName(main).getMethod("main", String[].class).invoke(null, (Object) args);
            } catch (java.lang.reflect.InvocationTargetException e) {
                code = e.getCause() instanceof Exited x ? x.code : 1;
                if (!(e.getCause() instanceof Exited)) e.getCause().printStackTrace();
            } catch (Exited x) {
                code = x.code;
            } catch (Throwable t) {
                code = 1;
                t.printStackTrace();
            } finally {
                System.out.flush();
                System.err.flush();
                outSwitch.target = errSwitch.target = OutputStream.nullOutputStream();
                System.setIn(realIn);
            }
            if (exitCode != null) code = exitCode;
            realOut.println("{\"name\": " + json(name) + ", \"code\": " + code + ", \"stdout\": " + json(out.toString(StandardCharsets.UTF_8))
                + ", \"stderr\": " + json(err.toString(StandardCharsets.UTF_8)) + "}");
            realOut.flush();
        }
        realOut.flush();
        Runtime.getRuntime().halt(0);  // tools leave non-daemon threads behind
    }

    static String json(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
                // ASCII out: a raw U+0085 or U+2028 in a dumped record would split the line for Python's splitlines
                default -> { if (c < 0x20 || c > 0x7e) b.append(String.format("\\u%04x", (int) c)); else b.append(c); }
            }
        }
        return b.append('"').toString();
    }
}

/** The Java AdminClient's read calls: one line per result, "call<TAB>result" (Kafka's own toString),
 * in a stable order so two clusters compare. */
@SuppressWarnings("removal")  // listConsumerGroups: what 4.1 clients still call
class AdminReads {
    static void out(String call, Object result) {
        System.out.println(call + "\t" + result);
    }

    static void run(String[] args) throws Exception {
        String prefix = args[1];
        List<String> groups = Arrays.asList(args).subList(2, args.length);
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        try (Admin admin = Admin.create(props)) {
            List<TopicListing> listings = new ArrayList<>(admin.listTopics(new ListTopicsOptions().listInternal(true)).listings().get());
            listings.sort(Comparator.comparing(TopicListing::name));
            List<String> names = new ArrayList<>();
            for (TopicListing t : listings) {
                if (t.name().startsWith(prefix) || t.isInternal()) out("listTopics", t);
                if (t.name().startsWith(prefix)) names.add(t.name());
            }

            DescribeClusterResult cluster = admin.describeCluster();
            out("describeCluster.nodes", cluster.nodes().get());
            out("describeCluster.controller", cluster.controller().get());
            out("describeCluster.clusterId", cluster.clusterId().get());

            // A limit of one partition per response makes DescribeTopicPartitions page with its cursor.
            Map<String, TopicDescription> described = admin.describeTopics(names,
                new DescribeTopicsOptions().partitionSizeLimitPerResponse(1)).allTopicNames().get();
            for (String name : new TreeSet<>(described.keySet())) out("describeTopics", described.get(name));

            List<ConsumerGroupListing> listed = new ArrayList<>(admin.listConsumerGroups().all().get());
            listed.sort(Comparator.comparing(ConsumerGroupListing::groupId));
            for (ConsumerGroupListing g : listed) if (g.groupId().startsWith(prefix)) out("listConsumerGroups", g);

            Map<String, ConsumerGroupDescription> groupDescriptions = admin.describeConsumerGroups(groups).all().get();
            for (String g : groups) out("describeConsumerGroups", groupDescriptions.get(g));
            for (String g : groups) {
                Map<TopicPartition, org.apache.kafka.clients.consumer.OffsetAndMetadata> offsets =
                    admin.listConsumerGroupOffsets(g).partitionsToOffsetAndMetadata().get();
                offsets.entrySet().stream().sorted(Comparator.comparing(e -> e.getKey().toString()))
                    .forEach(e -> out("listConsumerGroupOffsets " + g, e.getKey() + " " + e.getValue()));
            }

            Map<String, TopicDescription> all = admin.describeTopics(names).allTopicNames().get();
            List<TopicPartition> partitions = new ArrayList<>();
            for (String name : new TreeSet<>(all.keySet()))
                for (TopicPartitionInfo p : all.get(name).partitions()) partitions.add(new TopicPartition(name, p.partition()));
            Map<String, OffsetSpec> specs = new LinkedHashMap<>();
            specs.put("earliest", OffsetSpec.earliest());
            specs.put("latest", OffsetSpec.latest());
            specs.put("forTimestamp", OffsetSpec.forTimestamp(1_700_000_000_005L));
            for (Map.Entry<String, OffsetSpec> spec : specs.entrySet()) {
                Map<TopicPartition, OffsetSpec> request = partitions.stream().collect(Collectors.toMap(tp -> tp, tp -> spec.getValue()));
                Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> offsets = admin.listOffsets(request).all().get();
                for (TopicPartition tp : partitions) out("listOffsets " + spec.getKey(), tp + " " + offsets.get(tp));
            }
            Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> committed = admin.listOffsets(
                partitions.stream().collect(Collectors.toMap(tp -> tp, tp -> OffsetSpec.latest())),
                new ListOffsetsOptions(IsolationLevel.READ_COMMITTED)).all().get();
            for (TopicPartition tp : partitions) out("listOffsets latest read_committed", tp + " " + committed.get(tp));

            List<ConfigResource> resources = names.stream().map(n -> new ConfigResource(ConfigResource.Type.TOPIC, n)).toList();
            Map<ConfigResource, Config> configs = admin.describeConfigs(resources, new DescribeConfigsOptions().includeSynonyms(true)).all().get();
            for (ConfigResource r : resources) {
                configs.get(r).entries().stream().sorted(Comparator.comparing(ConfigEntry::name))
                    .forEach(e -> out("describeConfigs " + r.name(), e));
            }
        }
    }
}
