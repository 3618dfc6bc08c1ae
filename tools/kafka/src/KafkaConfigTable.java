import java.lang.reflect.Field;
import java.util.Map;
import java.util.TreeMap;

import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.metadata.KafkaConfigSchema;

/**
 * Prints, as JSON, the config names and types that Kafka's RecordRedactor judges ConfigRecords by:
 * the ConfigDefs of KafkaRaftServer.configSchema (what a KRaft node builds its redactor with). Its
 * rule (KafkaConfigSchema.isSensitive): a resource type without a ConfigDef, a name its ConfigDef
 * does not know, or a PASSWORD-typed config is sensitive. records/kafka_configs.json is this
 * program's output; tests/test_redaction_table.py runs it again and compares.
 *
 *   java -cp 'tools/kafka/lib/*' tools/kafka/src/KafkaConfigTable.java > records/kafka_configs.json
 */
public class KafkaConfigTable {
    public static void main(String[] args) throws Exception {
        KafkaConfigSchema schema = kafka.server.KafkaRaftServer$.MODULE$.configSchema();
        Field field = KafkaConfigSchema.class.getDeclaredField("configDefs");
        field.setAccessible(true);
        @SuppressWarnings("unchecked")
        Map<ConfigResource.Type, ConfigDef> defs = (Map<ConfigResource.Type, ConfigDef>) field.get(schema);
        Map<String, ConfigResource.Type> types = new TreeMap<>();
        for (ConfigResource.Type type : defs.keySet()) types.put(type.name(), type);

        StringBuilder out = new StringBuilder();
        out.append("{\n  \"kafkaVersion\": \"").append(org.apache.kafka.common.utils.internals.AppInfoParser.getVersion()).append("\",\n");
        out.append("  \"source\": \"kafka.server.KafkaRaftServer.configSchema\",\n");
        out.append("  \"resourceTypes\": {");
        String typeSep = "\n";
        for (ConfigResource.Type type : types.values()) {
            out.append(typeSep).append("    \"").append(type.name()).append("\": {\"id\": ").append(type.id()).append(", \"configs\": {");
            Map<String, ConfigDef.ConfigKey> keys = new TreeMap<>(defs.get(type).configKeys());
            String sep = "\n";
            for (Map.Entry<String, ConfigDef.ConfigKey> e : keys.entrySet()) {
                out.append(sep).append("      \"").append(e.getKey()).append("\": \"").append(e.getValue().type.name()).append('"');
                sep = ",\n";
            }
            out.append("\n    }}");
            typeSep = ",\n";
        }
        out.append("\n  }\n}\n");
        System.out.print(out);
    }
}
