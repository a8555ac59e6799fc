package mailer.flink;

import java.util.concurrent.atomic.AtomicLong;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;

/**
 * A blackhole that counts: like Flink's {@code DiscardingSink} (Sink V2), plus one counter
 * increment per record. Each writer adds its count to a JVM-wide total when it closes; the
 * benchmark runs Flink's mini-cluster in its own JVM, so the total is the job's.
 */
public final class CountingSink<T> implements Sink<T> {
    private static final long serialVersionUID = 1L;
    private static final AtomicLong TOTAL = new AtomicLong();

    /** Records every writer of the last job saw (read after {@code execute()} returns). */
    public static long total() {
        return TOTAL.get();
    }

    public static void reset() {
        TOTAL.set(0);
    }

    @Override
    public SinkWriter<T> createWriter(WriterInitContext context) {
        return new Writer<>();
    }

    private static final class Writer<T> implements SinkWriter<T> {
        private long count;

        @Override
        public void write(T element, Context context) {
            count++;
        }

        @Override
        public void flush(boolean endOfInput) {}

        @Override
        public void close() {
            TOTAL.addAndGet(count);
            count = 0;
        }
    }
}
