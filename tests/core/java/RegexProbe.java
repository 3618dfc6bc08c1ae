import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import java.util.Scanner;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;

/** One line per pattern: hex(pattern) hex(input)...; prints ERR, or a 0/1 per input (matches()). */
public class RegexProbe {
    static String text(String hex) {
        return new String(HexFormat.of().parseHex(hex), StandardCharsets.UTF_8);
    }

    public static void main(String[] args) {
        Scanner in = new Scanner(System.in, StandardCharsets.UTF_8);
        while (in.hasNextLine()) {
            String[] parts = in.nextLine().split(" ", -1);
            Pattern p;
            try {
                p = Pattern.compile(text(parts[0]));
            } catch (PatternSyntaxException e) {
                System.out.println("ERR");
                continue;
            }
            StringBuilder out = new StringBuilder("OK ");
            for (int k = 1; k < parts.length; k++) {
                out.append(p.matcher(text(parts[k])).matches() ? '1' : '0');
            }
            System.out.println(out);
        }
    }
}
