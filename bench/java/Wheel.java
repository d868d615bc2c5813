/* SPDX-License-Identifier: MIT */
// Netty's HashedWheelTimer (Debian's libnetty-java, netty-common.jar) on
// W2 and W4 of ../shared/bench/WORKLOADS.md. Compiled and run by
// bench/run.sh.
//
// Usage: java -cp netty-common.jar:. Wheel <w2|w4> [key=value ...]
// A hashed wheel is the other classic design for connection timeouts:
// O(1) schedule and cancel, the price being tick granularity (default
// 100 ms ticks, 512 buckets) and a worker that wakes every tick. Its cancel
// is lazy: cancelled timeouts are unlinked by the worker at the next tick,
// so the invariants wait (up to 10 s) for pendingTimeouts() to settle.
// Defaults of new HashedWheelTimer() throughout.

import io.netty.util.HashedWheelTimer;
import io.netty.util.Timeout;
import io.netty.util.TimerTask;
import java.util.Arrays;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

public final class Wheel {
    static final String SYS = "netty";

    static void waitPending(HashedWheelTimer t, long want) throws Exception {
        for (int i = 0; i < 1000 && t.pendingTimeouts() != want; i++)
            Thread.sleep(10);
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
        long t0 = System.nanoTime();
        w2Rounds(timer, slots, r, rng, never);
        long ns = System.nanoTime() - t0;
        waitPending(timer, l);
        Stpe.check(timer.pendingTimeouts() == l, "w2", SYS,
                   timer.pendingTimeouts() + " pending, want " + l);
        Stpe.check(ran.get() == 0, "w2", SYS, ran.get() + " ran");
        for (int i = 0; i < l; i++)
            Stpe.check(!slots[i].isExpired() && !slots[i].isCancelled(), "w2",
                       SYS, "slot " + i + " not pending");
        Stpe.result("w2", SYS, "rounds_per_s", r / (ns / 1e9));
        Stpe.result("w2", SYS, "ns_per_round", (double) ns / r);
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
        waitPending(timer, 0);
        Stpe.check(timer.pendingTimeouts() == 0, "w4", SYS, "warm-up pending");

        long heap0 = Stpe.gcAndUsedHeap();
        long rss0 = Stpe.rss();
        long t0 = System.nanoTime();
        for (int i = 0; i < p; i++)
            h[i] = timer.newTimeout(task, 1, TimeUnit.HOURS);
        long t1 = System.nanoTime();
        // Let the worker move them from its inbound queue to the wheel.
        Thread.sleep(Math.min(3000, 200 + p / 800));
        long heap1 = Stpe.gcAndUsedHeap();
        long rss1 = Stpe.rss();
        Stpe.check(timer.pendingTimeouts() == p, "w4", SYS,
                   timer.pendingTimeouts() + " pending");
        long t2 = System.nanoTime();
        for (int i = 0; i < p; i++)
            if (!h[i].cancel())
                Stpe.check(false, "w4", SYS, "cancel failed");
        long t3 = System.nanoTime();
        waitPending(timer, 0);
        Stpe.check(timer.pendingTimeouts() == 0 && ran.get() == 0, "w4", SYS,
                   timer.pendingTimeouts() + " pending after cancel");
        Stpe.result("w4", SYS, "bytes_per_task", (double) (rss1 - rss0) / p);
        Stpe.result("w4", SYS, "heap_bytes_per_task",
                    (double) (heap1 - heap0) / p);
        Stpe.result("w4", SYS, "ns_per_cancel", (double) (t3 - t2) / p);
        Stpe.result("w4", SYS, "ns_per_schedule", (double) (t1 - t0) / p);
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
