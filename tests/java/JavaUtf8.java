import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HexFormat;

/** For each line of hex bytes in the file named by args[0]: the UTF-16 code units (hex) of
 *  new String(bytes, UTF_8), the decoding Kafka applies to keys, values and header keys. */
public class JavaUtf8 {
    public static void main(String[] args) throws Exception {
        HexFormat hex = HexFormat.of();
        StringBuilder out = new StringBuilder();
        for (String line : Files.readAllLines(Path.of(args[0]))) {
            String text = new String(hex.parseHex(line), StandardCharsets.UTF_8);
            out.append(hex.formatHex(text.getBytes(StandardCharsets.UTF_16BE))).append('\n');
        }
        System.out.print(out);
    }
}
