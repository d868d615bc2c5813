/* SPDX-License-Identifier: MIT */
// Java's ScheduledThreadPoolExecutor (JDK 17) on W1-W4 of
// ../shared/bench/WORKLOADS.md. Compiled and run by bench/run.sh.
//
// Usage: java Stpe <w1|w2|w3|w4> [key=value ...]   (same keys as w_chime)
// Prints "RESULT <workload> stpe <metric> <value>"; exits 2 with an
// "INVARIANT" line on stderr when an invariant breaks. 2 core threads,
// prestarted; setRemoveOnCancelPolicy(true) for W2/W4. The same splitmix64
// PRNG and seed as the C programs (bench/common.h), System.nanoTime()
// (CLOCK_MONOTONIC on Linux). JIT warm-up: W1/W2 run their warm-up phase
// twice before measuring, W3 has its own 1 s warm-up, W4 schedules and
// cancels 50k tasks first.
// CPU time per item (cpu_ns_per_*, as in bench/common.h) is the process's
// CPU time from OperatingSystemMXBean.getProcessCpuTime(): every thread,
// GC and JIT included. On Linux the JDK reads it with times(2), in 10 ms
// ticks: about 5 % on the shortest timed region at full size (W4's
// schedule loop, ~0.2 s), noise in --quick.
// slack_ns=N (W3): the JVM was started under bench/timerslack.c, so every
// thread sleeps with N ns of timer slack; the figures are reported as
// system "stpe-slack", and the slack of the process's main thread
// (/proc/self/timerslack_ns, which every later thread inherited) is
// checked.

import java.io.IOException;
import java.io.PrintWriter;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Arrays;
import java.util.Locale;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

public final class Stpe {
    static String SYS = "stpe";
    static String[] args;
    static final com.sun.management.OperatingSystemMXBean OS =
        (com.sun.management.OperatingSystemMXBean)
            ManagementFactory.getOperatingSystemMXBean();

    // CPU time of the whole process so far, ns (see the note at the top).
    static long cpu() {
        return OS.getProcessCpuTime();
    }

    // ---- shared helpers (mirrors bench/common.h) ----

    static final class Rng {
        long s = 0x5eed5eed12345678L;

        long next() {
            long z = (s += 0x9e3779b97f4a7c15L);
            z = (z ^ (z >>> 30)) * 0xbf58476d1ce4e5b9L;
            z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL;
            return z ^ (z >>> 31);
        }

        // Uniform in [0, n), n > 0: the high 64 bits of next() * n.
        long below(long n) {
            long x = next();
            return Math.multiplyHigh(x, n) + ((x >> 63) & n);
        }
    }

    static long arg(String key, long def) {
        for (int i = 1; i < args.length; i++)
            if (args[i].startsWith(key + "="))
                return Long.parseLong(args[i].substring(key.length() + 1));
        return def;
    }

    static String sarg(String key, String def) {
        for (int i = 1; i < args.length; i++)
            if (args[i].startsWith(key + "="))
                return args[i].substring(key.length() + 1);
        return def;
    }

    static void result(String w, String sys, String metric, double v) {
        System.out.println(String.format(Locale.ROOT, "RESULT %s %s %s %.6e",
                                         w, sys, metric, v));
        System.out.flush();
    }

    static void check(boolean ok, String w, String sys, String what) {
        if (!ok) {
            System.err.println("INVARIANT " + w + " " + sys + ": " + what);
            System.err.flush();
            Runtime.getRuntime().halt(2);
        }
    }

    // VmRSS from /proc/self/status, in bytes, after a full GC.
    static long rss() throws IOException {
        for (String line : Files.readAllLines(Paths.get("/proc/self/status")))
            if (line.startsWith("VmRSS:"))
                return Long.parseLong(line.replaceAll("[^0-9]", "")) * 1024;
        return -1;
    }

    static long gcAndUsedHeap() throws InterruptedException {
        Runtime rt = Runtime.getRuntime();
        for (int i = 0; i < 3; i++) {
            System.gc();
            Thread.sleep(50);
        }
        return rt.totalMemory() - rt.freeMemory();
    }

    static long pct(long[] s, int n, double q) {
        if (n == 0)
            return 0;
        long rank = (long) (q * n + 0.999999);
        if (rank < 1)
            rank = 1;
        if (rank > n)
            rank = n;
        return s[(int) rank - 1];
    }

    static void latenessReport(String w, String sys, long[] s, int n,
                               String dump) throws IOException {
        Arrays.sort(s, 0, n);
        result(w, sys, "p50_us", pct(s, n, 0.50) / 1e3);
        result(w, sys, "p99_us", pct(s, n, 0.99) / 1e3);
        result(w, sys, "p999_us", pct(s, n, 0.999) / 1e3);
        result(w, sys, "max_us", n > 0 ? s[n - 1] / 1e3 : 0);
        if (dump == null || dump.isEmpty())
            return;
        try (PrintWriter out = new PrintWriter(dump)) {
            int i = 0;
            for (int k = 0; k <= 180; k++) {
                double x = 10.0 * Math.pow(10.0, k / 20.0);
                while (i < n && s[i] <= x)
                    i++;
                out.println(String.format(Locale.ROOT, "%.6g %.9f", x / 1e3,
                                          n > 0 ? (double) i / n : 0.0));
            }
        }
    }

    static void sleepUntil(long t) throws InterruptedException {
        long now;
        while ((now = System.nanoTime()) < t)
            Thread.sleep((t - now) / 1_000_000L, (int) ((t - now) % 1_000_000L));
    }

    static ScheduledThreadPoolExecutor newPool(boolean removeOnCancel) {
        ScheduledThreadPoolExecutor ex =
            new ScheduledThreadPoolExecutor((int) arg("threads", 2));
        ex.setRemoveOnCancelPolicy(removeOnCancel);
        ex.prestartAllCoreThreads();
        return ex;
    }

    static void shutdown(ScheduledThreadPoolExecutor ex) throws Exception {
        ex.shutdownNow();
        ex.awaitTermination(10, TimeUnit.SECONDS);
    }

    // ---- W1: fire-throughput ----

    static final AtomicLong w1Count = new AtomicLong();
    static volatile long w1Target;
    static volatile CountDownLatch w1Done;
    static long w1SubmitNs, w1Backlog, w1Cpu;

    static long w1Phase(ScheduledThreadPoolExecutor ex, long n, Rng rng)
        throws InterruptedException {
        w1Count.set(0);
        w1Target = n;
        w1Done = new CountDownLatch(1);
        Runnable r = () -> {
            if (w1Count.incrementAndGet() == w1Target)
                w1Done.countDown();
        };
        long c0 = cpu();
        long t0 = System.nanoTime();
        for (long i = 0; i < n; i++)
            ex.schedule(r, rng.below(10_000_001L), TimeUnit.NANOSECONDS);
        w1SubmitNs = System.nanoTime() - t0;
        w1Backlog = ex.getQueue().size();
        w1Done.await();
        long t1 = System.nanoTime();
        w1Cpu = cpu() - c0;
        check(w1Count.get() == n, "w1", SYS, "counter " + w1Count.get());
        return t1 - t0;
    }

    static void w1() throws Exception {
        long n = arg("N", 1_000_000);
        long warm = arg("warm", n / 10);
        Rng rng = new Rng();
        ScheduledThreadPoolExecutor ex = newPool(false);
        long warmed = 0;
        for (int rep = 0; rep < 2 && warm > 0; rep++, warmed += warm)
            w1Phase(ex, warm, rng);
        // The count moves after a task returns: let the warm-up settle.
        for (int i = 0; i < 1000 && ex.getCompletedTaskCount() < warmed; i++)
            Thread.sleep(1);
        long done0 = ex.getCompletedTaskCount();
        check(done0 == warmed, "w1", SYS, "warm-up completed " + done0);
        long ns = w1Phase(ex, n, rng);
        for (int i = 0; i < 1000 && ex.getCompletedTaskCount() - done0 < n; i++)
            Thread.sleep(1);
        check(ex.getCompletedTaskCount() - done0 == n, "w1", SYS,
              "completed " + (ex.getCompletedTaskCount() - done0));
        check(ex.getQueue().isEmpty(), "w1", SYS, "queue not empty");
        result("w1", SYS, "tasks_per_s", n / (ns / 1e9));
        result("w1", SYS, "cpu_ns_per_task", (double) w1Cpu / n);
        result("w1", SYS, "ns_per_schedule", (double) w1SubmitNs / n);
        result("w1", SYS, "backlog_at_last_submit", (double) w1Backlog);
        shutdown(ex);
    }

    // ---- W2: timeout-churn ----

    static final AtomicLong w2Ran = new AtomicLong();

    static void w2Rounds(ScheduledThreadPoolExecutor ex,
                         ScheduledFuture<?>[] slots, long r, Rng rng,
                         Runnable never) {
        int l = slots.length;
        for (long k = 0; k < r; k++) {
            int i = (int) rng.below(l);
            if (!slots[i].cancel(false))
                check(false, "w2", SYS, "cancel failed");
            slots[i] = ex.schedule(never, 60, TimeUnit.SECONDS);
        }
    }

    static void w2() throws Exception {
        int l = (int) arg("L", 100_000);
        long r = arg("R", 1_000_000);
        long warm = arg("warm", r / 10);
        Rng rng = new Rng();
        ScheduledThreadPoolExecutor ex = newPool(true);
        Runnable never = () -> w2Ran.incrementAndGet();
        ScheduledFuture<?>[] slots = new ScheduledFuture<?>[l];
        for (int i = 0; i < l; i++)
            slots[i] = ex.schedule(never, 60, TimeUnit.SECONDS);
        for (int rep = 0; rep < 2; rep++)
            w2Rounds(ex, slots, warm, rng, never);
        long c0 = cpu();
        long t0 = System.nanoTime();
        w2Rounds(ex, slots, r, rng, never);
        long ns = System.nanoTime() - t0;
        long cpuNs = cpu() - c0;
        check(ex.getQueue().size() == l, "w2", SYS,
              ex.getQueue().size() + " queued, want " + l);
        check(w2Ran.get() == 0, "w2", SYS, w2Ran.get() + " ran");
        for (int i = 0; i < l; i++)
            check(!slots[i].isDone(), "w2", SYS, "slot " + i + " done");
        result("w2", SYS, "rounds_per_s", r / (ns / 1e9));
        result("w2", SYS, "ns_per_round", (double) ns / r);
        result("w2", SYS, "cpu_ns_per_round", (double) cpuNs / r);
        shutdown(ex);
    }

    // ---- W3: lateness ----

    static long w3Period, w3Mstart, w3Mend;
    static long[] w3Samples;
    static final AtomicInteger w3N = new AtomicInteger();

    static final class W3Task implements Runnable {
        long first;
        long k; // runs of one periodic task never overlap

        public void run() {
            long now = System.nanoTime();
            long sched = first + k * w3Period;
            k++;
            if (sched >= w3Mstart && sched < w3Mend) {
                int i = w3N.getAndIncrement();
                if (i < w3Samples.length)
                    w3Samples[i] = now - sched;
            }
        }
    }

    static void w3() throws Exception {
        int tasks = (int) arg("tasks", 1000);
        w3Period = arg("period_ms", 10) * 1_000_000L;
        long warm = arg("warm_ms", 1000) * 1_000_000L;
        long measure = arg("measure_ms", 5000) * 1_000_000L;
        String dump = sarg("dump", null);
        Rng rng = new Rng();
        long expect = (long) tasks * (measure / w3Period);
        w3Samples = new long[(int) (expect + tasks)];
        W3Task[] ts = new W3Task[tasks];
        ScheduledFuture<?>[] h = new ScheduledFuture<?>[tasks];
        ScheduledThreadPoolExecutor ex = newPool(false);
        long t0 = System.nanoTime() + 50_000_000L;
        w3Mstart = t0 + warm;
        w3Mend = w3Mstart + measure;
        for (int i = 0; i < tasks; i++) {
            ts[i] = new W3Task();
            ts[i].first = t0 + rng.below(w3Period);
            // As in C: the executor reads the clock after us, so the real
            // first time is at or just after `first` (errs against us).
            long delay = ts[i].first - System.nanoTime();
            h[i] = ex.scheduleAtFixedRate(ts[i], delay, w3Period,
                                          TimeUnit.NANOSECONDS);
        }
        // CPU time over the measured window, then past it.
        sleepUntil(w3Mstart);
        long c0 = cpu();
        sleepUntil(w3Mend);
        long cpuNs = cpu() - c0;
        sleepUntil(w3Mend + 20_000_000L);
        for (int i = 0; i < 2000 && w3N.get() < expect; i++)
            Thread.sleep(1);
        for (int i = 0; i < tasks; i++)
            check(h[i].cancel(false), "w3", SYS, "cancel failed");
        shutdown(ex);
        int n = w3N.get();
        check(n == expect, "w3", SYS,
              n + " runs in the window, want " + expect + " (fell behind?)");
        result("w3", SYS, "runs_per_s", n / (measure / 1e9));
        result("w3", SYS, "cpu_ns_per_run", (double) cpuNs / n);
        latenessReport("w3", SYS, w3Samples, n, dump);
    }

    // ---- W4: memory ----

    static void w4() throws Exception {
        int p = (int) arg("P", 1_000_000);
        ScheduledThreadPoolExecutor ex = newPool(true);
        Runnable r = () -> {};
        // JIT warm-up: schedule and cancel 50k tasks.
        ScheduledFuture<?>[] h = new ScheduledFuture<?>[Math.max(p, 50_000)];
        for (int i = 0; i < 50_000; i++)
            h[i] = ex.schedule(r, 1, TimeUnit.HOURS);
        for (int i = 0; i < 50_000; i++)
            h[i].cancel(false);
        Arrays.fill(h, null);
        check(ex.getQueue().isEmpty(), "w4", SYS, "warm-up queue not empty");

        long heap0 = gcAndUsedHeap();
        long rss0 = rss();
        long c0 = cpu();
        long t0 = System.nanoTime();
        for (int i = 0; i < p; i++)
            h[i] = ex.schedule(r, 1, TimeUnit.HOURS);
        long t1 = System.nanoTime();
        long c1 = cpu();
        long heap1 = gcAndUsedHeap();
        long rss1 = rss();
        check(ex.getQueue().size() == p, "w4", SYS,
              ex.getQueue().size() + " queued");
        long c2 = cpu();
        long t2 = System.nanoTime();
        for (int i = 0; i < p; i++)
            if (!h[i].cancel(false))
                check(false, "w4", SYS, "cancel failed");
        long t3 = System.nanoTime();
        long c3 = cpu();
        check(ex.getQueue().isEmpty(), "w4", SYS, "queue not empty");
        result("w4", SYS, "bytes_per_task", (double) (rss1 - rss0) / p);
        result("w4", SYS, "heap_bytes_per_task", (double) (heap1 - heap0) / p);
        result("w4", SYS, "ns_per_cancel", (double) (t3 - t2) / p);
        result("w4", SYS, "ns_per_schedule", (double) (t1 - t0) / p);
        result("w4", SYS, "cpu_ns_per_cancel", (double) (c3 - c2) / p);
        result("w4", SYS, "cpu_ns_per_schedule", (double) (c1 - c0) / p);
        shutdown(ex);
    }

    public static void main(String[] a) throws Exception {
        args = a;
        long slack = arg("slack_ns", 0);
        if (slack > 0) {
            SYS = "stpe-slack";
            // The JVM's first thread, whose slack every later thread
            // inherited. Reading another thread's value needs
            // CAP_SYS_NICE: without it the wrapper's own check stands.
            try {
                String v = new String(Files.readAllBytes(
                    Paths.get("/proc/self/timerslack_ns"))).trim();
                check(Long.parseLong(v) == slack, a[0], SYS,
                      "timer slack " + v + " ns, want " + slack
                          + " (not started by bench/timerslack?)");
            } catch (IOException e) {
                System.err.println("stpe: cannot read timer slack: " + e);
            }
        }
        if (a.length < 1) {
            System.err.println("usage: java Stpe w1|w2|w3|w4 [key=value ...]");
            System.exit(1);
        }
        switch (a[0]) {
        case "w1": w1(); break;
        case "w2": w2(); break;
        case "w3": w3(); break;
        case "w4": w4(); break;
        default:
            System.err.println("unknown workload " + a[0]);
            System.exit(1);
        }
        System.exit(0);
    }
}
