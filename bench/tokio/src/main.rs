// SPDX-License-Identifier: MIT
//! Tokio on the workloads of ../shared/bench/WORKLOADS.md: the hierarchical
//! timer wheel of tokio's runtime (`Sleep`) and tokio-util's `DelayQueue`.
//!
//! Usage: w_tokio <w1|w2|w4|w5> [key=value ...]
//!   w1 N=1000000 warm=100000 producer=main|task
//!        a 2-worker multi-thread runtime; the main thread (the producer,
//!        outside the runtime) spawns N tasks, each sleeping until its
//!        deadline (now + uniform [0, 10 ms], computed at the spawn) and then
//!        doing one atomic increment; time from the first spawn until the
//!        counter reaches N. producer=task (a diagnostic, `tokio-intask`):
//!        the producer is a task on one of the two workers.
//!   w2 L=100000 R=1000000 warm=100000 mode=dq|dq-reset|sleep|sleep-reset
//!        L live 60 s timers, R rounds on a uniformly random one:
//!        dq:          DelayQueue::remove() + DelayQueue::insert(60 s);
//!        dq-reset:    DelayQueue::reset(60 s);
//!        sleep:       the slot's pinned Box<Sleep> is dropped (deregistered)
//!                     and a new sleep(60 s) polled once (registered: an
//!                     unpolled Sleep is not in the wheel);
//!        sleep-reset: Sleep::reset(now + 60 s) on the registered Sleep.
//!   w4 P=1000000 mode=dq|sleep
//!        P pending 1 h timers: bytes per pending timer (RSS delta / P),
//!        ns per schedule, ns per cancel (DelayQueue::remove() / dropping
//!        the Sleep), in schedule order.
//!   w5 M=1000000
//!        a current-thread runtime in its own thread (the loop) runs one
//!        spawned task that receives boxed callbacks from an unbounded mpsc
//!        channel and runs them; the producer thread sends M.
//!
//! Every program prints `RESULT <workload> <system> <metric> <value>` lines
//! like the C programs (bench/common.h), the CPU time of the whole process
//! (getrusage(RUSAGE_SELF)) per item beside every rate, and checks its
//! invariants: a broken one prints `INVARIANT ...` and exits 2.
//!
//! W2 and W4 run on the thread of a current-thread runtime (I/O and time
//! drivers, as a server's), inside block_on, with the timers' futures polled
//! by hand with a waker that does nothing (they never fire in the run).
//! Before the timed rounds the runtime parks once (a 1 ms sleep), so that
//! its driver has a next wake-up time, as in a running server: tokio's
//! wheel wakes its driver (an eventfd write) for any timer registered
//! earlier than the driver's next wake-up, and before a first park every
//! registration would.

use std::future::Future;
use std::io::Write;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::task::{Context, RawWaker, RawWakerVTable, Waker};
use std::time::Duration;

use tokio::runtime::{Builder, Runtime};
use tokio::time::{sleep, sleep_until, Instant, Sleep};
use tokio_util::time::delay_queue::{DelayQueue, Key};

// ---- shared helpers (the Rust side of bench/common.h) ----------------------

const SEED: u64 = 0x5eed5eed12345678;

/// splitmix64 with the seed of bench/common.h: the same sequence as the C
/// and Java programs.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        Rng(SEED)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e3779b97f4a7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, n), n > 0 (Lemire's multiply-shift, as in C).
    fn below(&mut self, n: u64) -> u64 {
        ((self.next() as u128 * n as u128) >> 64) as u64
    }
}

fn result(w: &str, sys: &str, metric: &str, value: f64) {
    let out = std::io::stdout();
    let mut out = out.lock();
    let _ = writeln!(out, "RESULT {} {} {} {}", w, sys, metric, value);
    let _ = out.flush();
}

fn die(w: &str, sys: &str, what: &str) -> ! {
    eprintln!("INVARIANT {} {}: {}", w, sys, what);
    std::process::exit(2);
}

macro_rules! check {
    ($cond:expr, $w:expr, $sys:expr, $($fmt:tt)+) => {
        if !$cond {
            die($w, $sys, &format!($($fmt)+));
        }
    };
}

struct Args(Vec<String>);

impl Args {
    fn int(&self, key: &str, def: u64) -> u64 {
        match self.str(key) {
            Some(v) => v.parse().unwrap_or_else(|_| {
                eprintln!("bad value {}={}", key, v);
                std::process::exit(1)
            }),
            None => def,
        }
    }
    fn str(&self, key: &str) -> Option<&str> {
        self.0.iter().skip(2).find_map(|a| {
            let (k, v) = a.split_once('=')?;
            if k == key {
                Some(v)
            } else {
                None
            }
        })
    }
}

/// CPU time (user + system) of the whole process so far, every thread, ns.
fn cpu_ns() -> i64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return -1;
    }
    (ru.ru_utime.tv_sec as i64 + ru.ru_stime.tv_sec as i64) * 1_000_000_000
        + (ru.ru_utime.tv_usec as i64 + ru.ru_stime.tv_usec as i64) * 1000
}

/// Resident set size in bytes (/proc/self/statm).
fn rss_bytes() -> i64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: i64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1);
    if pages < 0 {
        return -1;
    }
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as i64
}

/// write(2)-family system calls of the whole process so far (/proc/self/io
/// syscw): counts the eventfd writes that wake the runtime. -1 if unknown.
fn syscw() -> i64 {
    let s = match std::fs::read_to_string("/proc/self/io") {
        Ok(s) => s,
        Err(_) => return -1,
    };
    s.lines()
        .find_map(|l| {
            l.strip_prefix("syscw: ")
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(-1)
}

fn ns_since(t: std::time::Instant) -> i64 {
    t.elapsed().as_nanos() as i64
}

fn noop_raw() -> RawWaker {
    RawWaker::new(std::ptr::null(), &NOOP_VTABLE)
}
fn noop_clone(_: *const ()) -> RawWaker {
    noop_raw()
}
fn noop(_: *const ()) {}
static NOOP_VTABLE: RawWakerVTable = RawWakerVTable::new(noop_clone, noop, noop, noop);

/// A waker that does nothing: the W2/W4 timers are polled by hand (to
/// register them) and never fire in the run.
fn noop_waker() -> Waker {
    // SAFETY: the vtable's functions ignore the null data pointer.
    unsafe { Waker::from_raw(noop_raw()) }
}

fn poll_once<F: Future + ?Sized>(f: Pin<&mut F>, cx: &mut Context<'_>) -> bool {
    f.poll(cx).is_ready()
}

/// The runtime of W2/W4: one thread, the I/O and time drivers.
fn current_thread() -> Runtime {
    Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Lets the runtime park once, so that its time driver has a next wake-up
/// (see the top of this file).
async fn settle() {
    sleep(Duration::from_millis(1)).await;
}

// ---- W1 ----------------------------------------------------------------------

static W1_COUNT: AtomicU64 = AtomicU64::new(0);
static W1_TARGET: AtomicU64 = AtomicU64::new(0);
static W1_EARLY: AtomicU64 = AtomicU64::new(0);
static W1_DONE: Mutex<Option<std::time::Instant>> = Mutex::new(None);
static W1_CV: Condvar = Condvar::new();

struct W1Phase {
    ns: i64,
    submit_ns: i64,
    cpu: i64,
}

/// One W1 task: sleeps until its deadline, then counts.
async fn w1_task(deadline: Instant) {
    sleep_until(deadline).await;
    if Instant::now() < deadline {
        W1_EARLY.fetch_add(1, Ordering::Relaxed);
    }
    if W1_COUNT.fetch_add(1, Ordering::AcqRel) + 1 == W1_TARGET.load(Ordering::Relaxed) {
        let mut done = W1_DONE.lock().unwrap();
        *done = Some(std::time::Instant::now());
        W1_CV.notify_one();
    }
}

/// Spawns the n tasks of a phase with `spawn`; returns the ns it took.
fn w1_produce(n: u64, rng: &mut Rng, spawn: impl Fn(Instant)) -> i64 {
    let t0 = std::time::Instant::now();
    for _ in 0..n {
        let delay = Duration::from_nanos(rng.below(10_000_000 + 1));
        spawn(Instant::now() + delay);
    }
    ns_since(t0)
}

/// in_task: the producer is itself a task on the runtime (it spawns into
/// its worker's local queue) instead of the main thread (the runtime's
/// global inject queue, and a worker woken for it).
fn w1_phase(rt: &Runtime, n: u64, rng: &mut Rng, in_task: bool) -> W1Phase {
    W1_COUNT.store(0, Ordering::SeqCst);
    W1_TARGET.store(n, Ordering::SeqCst);
    *W1_DONE.lock().unwrap() = None;
    let c0 = cpu_ns();
    let t0 = std::time::Instant::now();
    let mut producer = None;
    let mut submit_ns = 0;
    if in_task {
        let mut r = Rng(rng.0);
        producer = Some(rt.spawn(async move {
            let ns = w1_produce(n, &mut r, |d| {
                tokio::spawn(w1_task(d));
            });
            (r.0, ns)
        }));
    } else {
        submit_ns = w1_produce(n, rng, |d| {
            rt.spawn(w1_task(d));
        });
    }
    let mut done = W1_DONE.lock().unwrap();
    while done.is_none() {
        done = W1_CV.wait(done).unwrap();
    }
    let t_end = done.unwrap();
    drop(done);
    let cpu = cpu_ns() - c0;
    if let Some(h) = producer {
        let (state, ns) = rt.block_on(h).expect("producer task");
        rng.0 = state;
        submit_ns = ns;
    }
    W1Phase {
        ns: t_end.duration_since(t0).as_nanos() as i64,
        submit_ns,
        cpu,
    }
}

fn w1(a: &Args) {
    // producer=task is a diagnostic (not run by run.sh): see w1_phase.
    let in_task = a.str("producer").unwrap_or("main") == "task";
    let (w, sys) = ("w1", if in_task { "tokio-intask" } else { "tokio" });
    let n = a.int("N", 1_000_000);
    let warm = a.int("warm", n / 10);
    check!(n > 0, w, sys, "N must be > 0");
    let rt = Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut rng = Rng::new();
    if warm > 0 {
        w1_phase(&rt, warm, &mut rng, in_task);
    }
    let ph = w1_phase(&rt, n, &mut rng, in_task);
    let count = W1_COUNT.load(Ordering::SeqCst);
    check!(count == n, w, sys, "counter {} != {}", count, n);
    let early = W1_EARLY.load(Ordering::SeqCst);
    check!(
        early == 0,
        w,
        sys,
        "{} tasks woke before their deadline",
        early
    );
    result(w, sys, "tasks_per_s", n as f64 / (ph.ns as f64 / 1e9));
    result(w, sys, "cpu_ns_per_task", ph.cpu as f64 / n as f64);
    result(w, sys, "ns_per_schedule", ph.submit_ns as f64 / n as f64);
    // Every task has run to completion: shutting down finds none pending.
    rt.shutdown_timeout(Duration::from_secs(10));
}

// ---- W2 ----------------------------------------------------------------------

const W2_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, PartialEq)]
enum W2Mode {
    Dq,
    DqReset,
    Sleep,
    SleepReset,
}

fn w2(a: &Args) {
    let l = a.int("L", 100_000);
    let r = a.int("R", 1_000_000);
    let warm = a.int("warm", r / 10);
    let (mode, sys) = match a.str("mode").unwrap_or("dq") {
        "dq" => (W2Mode::Dq, "tokio-dq"),
        "dq-reset" => (W2Mode::DqReset, "tokio-dq-reset"),
        "sleep" => (W2Mode::Sleep, "tokio-sleep"),
        "sleep-reset" => (W2Mode::SleepReset, "tokio-sleep-reset"),
        m => {
            eprintln!("w2: unknown mode {}", m);
            std::process::exit(1)
        }
    };
    check!(l > 0 && r > 0, "w2", sys, "L and R must be > 0");
    let rt = current_thread();
    let (ns, cpu) = rt.block_on(async move {
        match mode {
            W2Mode::Dq | W2Mode::DqReset => w2_dq(l, r, warm, mode, sys).await,
            W2Mode::Sleep | W2Mode::SleepReset => w2_sleep(l, r, warm, mode, sys).await,
        }
    });
    result("w2", sys, "rounds_per_s", r as f64 / (ns as f64 / 1e9));
    result("w2", sys, "ns_per_round", ns as f64 / r as f64);
    result("w2", sys, "cpu_ns_per_round", cpu as f64 / r as f64);
}

fn w2_dq_rounds(dq: &mut DelayQueue<usize>, keys: &mut [Key], r: u64, rng: &mut Rng, reset: bool) {
    let l = keys.len() as u64;
    for _ in 0..r {
        let i = rng.below(l) as usize;
        if reset {
            dq.reset(&keys[i], W2_TIMEOUT);
        } else {
            dq.remove(&keys[i]);
            keys[i] = dq.insert(i, W2_TIMEOUT);
        }
    }
}

async fn w2_dq(l: u64, r: u64, warm: u64, mode: W2Mode, sys: &str) -> (i64, i64) {
    let waker = noop_waker();
    let mut cx = Context::from_waker(&waker);
    let mut rng = Rng::new();
    let reset = mode == W2Mode::DqReset;
    let mut dq: DelayQueue<usize> = DelayQueue::new();
    let mut keys: Vec<Key> = (0..l as usize).map(|i| dq.insert(i, W2_TIMEOUT)).collect();
    // The queue's task polls it: its own Sleep (the earliest deadline)
    // is registered with the runtime's wheel.
    check!(
        dq.poll_expired(&mut cx).is_pending(),
        "w2",
        sys,
        "expired at start"
    );
    settle().await;
    w2_dq_rounds(&mut dq, &mut keys, warm, &mut rng, reset);
    let c0 = cpu_ns();
    let t0 = std::time::Instant::now();
    w2_dq_rounds(&mut dq, &mut keys, r, &mut rng, reset);
    let ns = ns_since(t0);
    let cpu = cpu_ns() - c0;

    // Let the driver run; nothing may have expired, exactly L are queued,
    // every slot's key is live with a deadline in (now, now + 60 s].
    settle().await;
    check!(
        dq.poll_expired(&mut cx).is_pending(),
        "w2",
        sys,
        "an entry expired"
    );
    check!(
        dq.len() == l as usize,
        "w2",
        sys,
        "{} queued, want {}",
        dq.len(),
        l
    );
    let now = Instant::now();
    for (i, k) in keys.iter().enumerate() {
        let e = dq.remove(k); // panics on a stale key
        check!(
            *e.get_ref() == i,
            "w2",
            sys,
            "slot {} holds {}",
            i,
            e.get_ref()
        );
        let d = e.deadline();
        check!(
            d > now && d <= now + W2_TIMEOUT,
            "w2",
            sys,
            "slot {}: deadline {:?} from now",
            i,
            d.checked_duration_since(now)
        );
    }
    check!(dq.is_empty(), "w2", sys, "{} left", dq.len());
    (ns, cpu)
}

fn new_sleep(d: Duration, cx: &mut Context<'_>) -> Pin<Box<Sleep>> {
    let mut s = Box::pin(sleep(d));
    let ready = poll_once(s.as_mut(), cx);
    assert!(!ready);
    s
}

fn w2_sleep_rounds(
    slots: &mut [Pin<Box<Sleep>>],
    r: u64,
    rng: &mut Rng,
    reset: bool,
    cx: &mut Context<'_>,
) {
    let l = slots.len() as u64;
    for _ in 0..r {
        let i = rng.below(l) as usize;
        if reset {
            slots[i].as_mut().reset(Instant::now() + W2_TIMEOUT);
        } else {
            slots[i] = new_sleep(W2_TIMEOUT, cx); // drops the old one
        }
    }
}

async fn w2_sleep(l: u64, r: u64, warm: u64, mode: W2Mode, sys: &str) -> (i64, i64) {
    let waker = noop_waker();
    let mut cx = Context::from_waker(&waker);
    let mut rng = Rng::new();
    let reset = mode == W2Mode::SleepReset;
    let mut slots: Vec<Pin<Box<Sleep>>> = (0..l).map(|_| new_sleep(W2_TIMEOUT, &mut cx)).collect();
    settle().await;
    w2_sleep_rounds(&mut slots, warm, &mut rng, reset, &mut cx);
    let c0 = cpu_ns();
    let t0 = std::time::Instant::now();
    w2_sleep_rounds(&mut slots, r, &mut rng, reset, &mut cx);
    let ns = ns_since(t0);
    let cpu = cpu_ns() - c0;

    settle().await;
    let now = Instant::now();
    for (i, s) in slots.iter_mut().enumerate() {
        check!(!s.is_elapsed(), "w2", sys, "slot {} elapsed", i);
        check!(
            !poll_once(s.as_mut(), &mut cx),
            "w2",
            sys,
            "slot {} fired",
            i
        );
        let d = s.deadline();
        check!(
            d > now && d <= now + W2_TIMEOUT,
            "w2",
            sys,
            "slot {}: deadline {:?} from now",
            i,
            d.checked_duration_since(now)
        );
    }
    (ns, cpu)
}

// ---- W4 ----------------------------------------------------------------------

const W4_TIMEOUT: Duration = Duration::from_secs(3600);

struct W4Figures {
    rss: i64,
    sched_ns: i64,
    sched_cpu: i64,
    cancel_ns: i64,
    cancel_cpu: i64,
}

/// A Vec with room for n elements, its pages faulted in before the RSS
/// baseline (the caller's handle array, as in the C programs).
fn prefaulted<T>(n: usize) -> Vec<T> {
    let mut v: Vec<T> = Vec::with_capacity(n);
    // SAFETY: writes bytes into the spare capacity; the length stays 0.
    unsafe {
        std::ptr::write_bytes(
            v.as_mut_ptr() as *mut u8,
            0xff,
            n * std::mem::size_of::<T>(),
        )
    };
    v
}

async fn w4_dq(p: u64, sys: &str) -> W4Figures {
    let waker = noop_waker();
    let mut cx = Context::from_waker(&waker);
    let mut keys: Vec<Key> = prefaulted(p as usize);
    // A sentinel timer earlier than all of them and one park: the driver
    // has a next wake-up before the timed inserts (top of the file).
    let mut sentinel = new_sleep(W4_TIMEOUT / 2, &mut cx);
    settle().await;
    let rss0 = rss_bytes();
    let mut dq: DelayQueue<usize> = DelayQueue::new();
    let c0 = cpu_ns();
    let t0 = std::time::Instant::now();
    for i in 0..p as usize {
        keys.push(dq.insert(i, W4_TIMEOUT));
    }
    let sched_ns = ns_since(t0);
    let sched_cpu = cpu_ns() - c0;
    let rss1 = rss_bytes();
    check!(dq.poll_expired(&mut cx).is_pending(), "w4", sys, "expired");
    check!(dq.len() == p as usize, "w4", sys, "{} queued", dq.len());

    let c2 = cpu_ns();
    let t2 = std::time::Instant::now();
    for k in keys.iter() {
        dq.remove(k);
    }
    let cancel_ns = ns_since(t2);
    let cancel_cpu = cpu_ns() - c2;
    check!(dq.is_empty(), "w4", sys, "{} left", dq.len());
    check!(
        !poll_once(sentinel.as_mut(), &mut cx),
        "w4",
        sys,
        "sentinel fired"
    );
    W4Figures {
        rss: rss1 - rss0,
        sched_ns,
        sched_cpu,
        cancel_ns,
        cancel_cpu,
    }
}

async fn w4_sleep(p: u64, sys: &str) -> W4Figures {
    let waker = noop_waker();
    let mut cx = Context::from_waker(&waker);
    let mut slots: Vec<Pin<Box<Sleep>>> = prefaulted(p as usize);
    eprintln!(
        "w4 {}: size_of::<Sleep>() = {}, align {} (each is a Box<Sleep>)",
        sys,
        std::mem::size_of::<Sleep>(),
        std::mem::align_of::<Sleep>()
    );
    let mut sentinel = new_sleep(W4_TIMEOUT / 2, &mut cx);
    settle().await;
    let rss0 = rss_bytes();
    let c0 = cpu_ns();
    let t0 = std::time::Instant::now();
    for _ in 0..p {
        slots.push(new_sleep(W4_TIMEOUT, &mut cx));
    }
    let sched_ns = ns_since(t0);
    let sched_cpu = cpu_ns() - c0;
    let rss1 = rss_bytes();
    for (i, s) in slots.iter().enumerate() {
        check!(!s.is_elapsed(), "w4", sys, "timer {} elapsed", i);
    }

    let c2 = cpu_ns();
    let t2 = std::time::Instant::now();
    slots.clear(); // drops them in order: each is removed from the wheel
    let cancel_ns = ns_since(t2);
    let cancel_cpu = cpu_ns() - c2;
    check!(
        !poll_once(sentinel.as_mut(), &mut cx),
        "w4",
        sys,
        "sentinel fired"
    );
    W4Figures {
        rss: rss1 - rss0,
        sched_ns,
        sched_cpu,
        cancel_ns,
        cancel_cpu,
    }
}

fn w4(a: &Args) {
    let p = a.int("P", 1_000_000);
    let (sleep_mode, sys) = match a.str("mode").unwrap_or("dq") {
        "dq" => (false, "tokio-dq"),
        "sleep" => (true, "tokio-sleep"),
        m => {
            eprintln!("w4: unknown mode {}", m);
            std::process::exit(1)
        }
    };
    check!(p > 0, "w4", sys, "P must be > 0");
    let rt = current_thread();
    let f = rt.block_on(async move {
        if sleep_mode {
            w4_sleep(p, sys).await
        } else {
            w4_dq(p, sys).await
        }
    });
    let pf = p as f64;
    result("w4", sys, "bytes_per_task", f.rss as f64 / pf);
    result("w4", sys, "ns_per_cancel", f.cancel_ns as f64 / pf);
    result("w4", sys, "ns_per_schedule", f.sched_ns as f64 / pf);
    result("w4", sys, "cpu_ns_per_cancel", f.cancel_cpu as f64 / pf);
    result("w4", sys, "cpu_ns_per_schedule", f.sched_cpu as f64 / pf);
}

// ---- W5 ----------------------------------------------------------------------

/// The loop's state, touched by the callbacks (on the loop thread only).
struct LoopState {
    count: u64,
    next: u64,
    out_of_order: u64,
    off_loop: u64,
    t_end: Option<std::time::Instant>,
}

type Callback = Box<dyn FnOnce(&mut LoopState) + Send>;

thread_local! {
    static ON_LOOP: std::cell::Cell<bool> = std::cell::Cell::new(false);
}

fn w5(a: &Args) {
    let sys = "tokio-mpsc";
    let m = a.int("M", 1_000_000);
    check!(m > 0, "w5", sys, "M must be > 0");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Callback>();
    let (hello_tx, hello_rx) = std::sync::mpsc::channel::<()>();
    let lp = std::thread::spawn(move || {
        ON_LOOP.with(|f| f.set(true));
        let rt = current_thread();
        rt.block_on(async move {
            let task = tokio::spawn(async move {
                let mut st = LoopState {
                    count: 0,
                    next: 0,
                    out_of_order: 0,
                    off_loop: 0,
                    t_end: None,
                };
                while let Some(cb) = rx.recv().await {
                    cb(&mut st);
                    if st.count == m {
                        st.t_end = Some(std::time::Instant::now());
                        break;
                    }
                }
                st
            });
            task.await.expect("loop task")
        })
    });
    // The loop is up and its task waits on the channel before the clock
    // starts.
    let hello: Callback = Box::new(move |_st: &mut LoopState| {
        hello_tx.send(()).unwrap();
    });
    tx.send(hello).ok().expect("send");
    hello_rx.recv().unwrap();

    let w0 = syscw();
    let c0 = cpu_ns();
    let t0 = std::time::Instant::now();
    for i in 0..m {
        let cb: Callback = Box::new(move |st: &mut LoopState| {
            if !ON_LOOP.with(|f| f.get()) {
                st.off_loop += 1;
            }
            if st.next != i {
                st.out_of_order += 1;
            }
            st.next = i + 1;
            st.count += 1;
        });
        check!(tx.send(cb).is_ok(), "w5", sys, "send failed");
    }
    let st = lp.join().expect("loop thread");
    let cpu = cpu_ns() - c0;
    let w1 = syscw();
    check!(
        st.count == m,
        "w5",
        sys,
        "{} callbacks, want {}",
        st.count,
        m
    );
    check!(st.off_loop == 0, "w5", sys, "{} off the loop", st.off_loop);
    check!(
        st.out_of_order == 0,
        "w5",
        sys,
        "{} out of order",
        st.out_of_order
    );
    let t_end = st.t_end.expect("end time");
    let ns = t_end.duration_since(t0).as_nanos() as f64;
    let mf = m as f64;
    result("w5", sys, "callbacks_per_s", mf / (ns / 1e9));
    result("w5", sys, "cpu_ns_per_cb", cpu as f64 / mf);
    if w0 >= 0 {
        result("w5", sys, "writes_per_cb", (w1 - w0) as f64 / mf);
        result("w5", sys, "syscw_per_cb", (w1 - w0) as f64 / mf);
    }
}

fn main() {
    let a = Args(std::env::args().collect());
    match a.0.get(1).map(|s| s.as_str()) {
        Some("w1") => w1(&a),
        Some("w2") => w2(&a),
        Some("w4") => w4(&a),
        Some("w5") => w5(&a),
        _ => {
            eprintln!("usage: w_tokio w1|w2|w4|w5 [key=value ...]");
            std::process::exit(1);
        }
    }
}
