/* SPDX-License-Identifier: MIT */
// Netty's HashedWheelTimer (Debian's libnetty-java, netty-common.jar) on
// W2 and W4 of ../shared/bench/WORKLOADS.md. Compiled and run by
// bench/run.sh.
//
// Usage: java -cp netty-common.jar:. Wheel <w2|w4> [key=value ...]
// A hashed wheel is the other classic design for connection timeouts:
// O(1) schedule and cancel, the price being tick granularity (default
// 100 ms ticks, 512 buckets) and a worker that wakes every tick. Both
// operations are deferred to that worker: newTimeout() appends to an
// inbound queue that the worker moves into the wheel at its ticks (at most
// 100,000 per tick), cancel() marks the timeout and queues it for the
// worker to unlink at its next tick. So W2 has two rates: the caller's
// (rounds_per_s: how fast the calls return) and the settled rate
// (settled_rounds_per_s: R over the time until the worker has applied
// every cancel and schedule of the R rounds).
//
// Settling is observed, not waited for: settle() submits a sentinel
// timeout with delay 0 behind everything the caller did. The worker moves
// the inbound queue in order and expires a timeout due in the current tick
// in the tick that moved it, and at the start of that tick it has unlinked
// every cancel queued before; so when the sentinel runs, every schedule is
// in the wheel and every earlier cancel but those queued during that very
// tick is applied. settle() repeats until pendingTimeouts() is exactly what
// the caller left (the second sentinel covers the stragglers).
// Defaults of new HashedWheelTimer() throughout.

import io.netty.util.HashedWheelTimer;
import io.netty.util.Timeout;
import io.netty.util.TimerTask;
import java.util.Arrays;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

public final class Wheel {
    static final String SYS = "netty";

    // Returns System.nanoTime() at which the worker ran the sentinel that
    // found pendingTimeouts() == want (see the note at the top).
    static long settle(HashedWheelTimer t, long want, String w)
        throws Exception {
        for (int i = 0; i < 100; i++) {
            CountDownLatch ran = new CountDownLatch(1);
            long[] at = new long[1];
            t.newTimeout(x -> {
                at[0] = System.nanoTime();
                ran.countDown();
            }, 0, TimeUnit.NANOSECONDS);
            Stpe.check(ran.await(60, TimeUnit.SECONDS), w, SYS,
                       "sentinel did not run within 60 s");
            if (t.pendingTimeouts() == want)
                return at[0];
        }
        Stpe.check(false, w, SYS, t.pendingTimeouts() + " pending, want "
                                      + want + " after 100 sentinels");
        return 0;
    }

    static final AtomicLong ran = new AtomicLong();

    static void w2Rounds(HashedWheelTimer timer, Timeout[] slots, long r,
                         Stpe.Rng rng, TimerTask never) {
        int l = slots.length;
        for (long k = 0; k < r; k++) {
            int i = (int) rng.below(l);
            if (!slots[i].cancel())
                Stpe.check(false, "w2", SYS, "cancel failed");
            slots[i] = timer.newTimeout(never, 60, TimeUnit.SECONDS);
        }
    }

    static void w2() throws Exception {
        int l = (int) Stpe.arg("L", 100_000);
        long r = Stpe.arg("R", 1_000_000);
        long warm = Stpe.arg("warm", r / 10);
        Stpe.Rng rng = new Stpe.Rng();
        HashedWheelTimer timer = new HashedWheelTimer();
        timer.start();
        TimerTask never = t -> ran.incrementAndGet();
        Timeout[] slots = new Timeout[l];
        for (int i = 0; i < l; i++)
            slots[i] = timer.newTimeout(never, 60, TimeUnit.SECONDS);
        for (int rep = 0; rep < 2; rep++)
            w2Rounds(timer, slots, warm, rng, never);
        settle(timer, l, "w2");
        long c0 = Stpe.cpu();
        long t0 = System.nanoTime();
        w2Rounds(timer, slots, r, rng, never);
        long ns = System.nanoTime() - t0;
        long cpuNs = Stpe.cpu() - c0;
        long settledNs = settle(timer, l, "w2") - t0;
        long settledCpu = Stpe.cpu() - c0;
        Stpe.check(timer.pendingTimeouts() == l, "w2", SYS,
                   timer.pendingTimeouts() + " pending, want " + l);
        Stpe.check(ran.get() == 0, "w2", SYS, ran.get() + " ran");
        for (int i = 0; i < l; i++)
            Stpe.check(!slots[i].isExpired() && !slots[i].isCancelled(), "w2",
                       SYS, "slot " + i + " not pending");
        Stpe.result("w2", SYS, "rounds_per_s", r / (ns / 1e9));
        Stpe.result("w2", SYS, "ns_per_round", (double) ns / r);
        Stpe.result("w2", SYS, "cpu_ns_per_round", (double) cpuNs / r);
        Stpe.result("w2", SYS, "settled_rounds_per_s", r / (settledNs / 1e9));
        Stpe.result("w2", SYS, "settled_cpu_ns_per_round",
                    (double) settledCpu / r);
        timer.stop();
    }

    static void w4() throws Exception {
        int p = (int) Stpe.arg("P", 1_000_000);
        HashedWheelTimer timer = new HashedWheelTimer();
        timer.start();
        TimerTask task = t -> ran.incrementAndGet();
        Timeout[] h = new Timeout[Math.max(p, 50_000)];
        // JIT warm-up: schedule and cancel 50k timeouts.
        for (int i = 0; i < 50_000; i++)
            h[i] = timer.newTimeout(task, 1, TimeUnit.HOURS);
        for (int i = 0; i < 50_000; i++)
            h[i].cancel();
        Arrays.fill(h, null);
        settle(timer, 0, "w4");

        long heap0 = Stpe.gcAndUsedHeap();
        long rss0 = Stpe.rss();
        long c0 = Stpe.cpu();
        long t0 = System.nanoTime();
        for (int i = 0; i < p; i++)
            h[i] = timer.newTimeout(task, 1, TimeUnit.HOURS);
        long t1 = System.nanoTime();
        long c1 = Stpe.cpu();
        // The worker moves them from its inbound queue to the wheel.
        settle(timer, p, "w4");
        long heap1 = Stpe.gcAndUsedHeap();
        long rss1 = Stpe.rss();
        Stpe.check(timer.pendingTimeouts() == p, "w4", SYS,
                   timer.pendingTimeouts() + " pending");
        long c2 = Stpe.cpu();
        long t2 = System.nanoTime();
        for (int i = 0; i < p; i++)
            if (!h[i].cancel())
                Stpe.check(false, "w4", SYS, "cancel failed");
        long t3 = System.nanoTime();
        long c3 = Stpe.cpu();
        settle(timer, 0, "w4");
        Stpe.check(timer.pendingTimeouts() == 0 && ran.get() == 0, "w4", SYS,
                   timer.pendingTimeouts() + " pending after cancel");
        Stpe.result("w4", SYS, "bytes_per_task", (double) (rss1 - rss0) / p);
        Stpe.result("w4", SYS, "heap_bytes_per_task",
                    (double) (heap1 - heap0) / p);
        Stpe.result("w4", SYS, "ns_per_cancel", (double) (t3 - t2) / p);
        Stpe.result("w4", SYS, "ns_per_schedule", (double) (t1 - t0) / p);
        Stpe.result("w4", SYS, "cpu_ns_per_cancel", (double) (c3 - c2) / p);
        Stpe.result("w4", SYS, "cpu_ns_per_schedule", (double) (c1 - c0) / p);
        timer.stop();
    }

    public static void main(String[] a) throws Exception {
        Stpe.args = a;
        if (a.length < 1) {
            System.err.println("usage: java Wheel w2|w4 [key=value ...]");
            System.exit(1);
        }
        switch (a[0]) {
        case "w2": w2(); break;
        case "w4": w4(); break;
        default:
            System.err.println("unknown workload " + a[0]);
            System.exit(1);
        }
        System.exit(0);
    }
}
