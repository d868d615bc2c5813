#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes the seed corpus of fuzz/fuzz_ops into fuzz/corpus/.

Each file is a short, meaningful operation sequence, encoded the way
m_gen_config() and m_gen_step() in tests/model.c decode bytes. The
files are committed; run this again only to regenerate them after changing
the decoder (libFuzzer accepts any bytes, so an outdated corpus still works,
it is just less pointed). The loop_* files have loop bindings; the others,
written before bindings were modelled, have none and decode as they did.
Check a file with:
    CHIME_MODEL_TRACE=1 build-fuzz/fuzz_ops fuzz/corpus/<name>
"""
import os
import sys

# Indexes into the decoder's tables (tests/model.c).
D = {"0": 0, "1ns": 2, "0.5ms": 3, "1ms": 4, "2ms": 6, "3ms": 7, "4ms": 8,
     "5ms": 9, "8ms": 10, "13ms": 11, "-1": 12, "MIN": 13, "MAX": 14,
     "MAX-1": 15}
P = {"1ms": 0, "2ms": 2, "3ms": 3, "4ms": 4, "5ms": 5, "0.5ms": 10,
     "10ms": 11, "30ms": 12, "MAX": 13, "0": 14, "-1ms": 15}
A = {"0": 0, "1ns": 1, "0.5ms": 3, "1ms": 4, "2ms": 6, "3ms": 8, "5ms": 10,
     "8ms": 12, "10ms": 13, "15ms": 14, "25ms": 15}
POLICY = {"abort": 0, "discard": 1, "discard_oldest": 2, "caller_runs": 3}
START = {"1000s": 0, "0": 5, "nearmax": 6, "nearmin": 7}


def config(remove_on_cancel=True, exec_delayed=True, cont_periodic=False,
           policy="abort", max_pending=0, start="1000s", heavy=False):
    c1 = (1 if remove_on_cancel else 0) | (0 if exec_delayed else 4)
    c1 |= (8 if cont_periodic else 0) | (POLICY[policy] << 4)
    c2 = (START[start] << 5) | (((max_pending - 1) << 2) if max_pending else 1)
    c3 = 0 if heavy else 1
    return [c1, c2, c3]


def fail(fail_on=0, cause_eio=True):
    if not fail_on:
        return [1 | (0x20 if cause_eio else 0)]
    return [((fail_on - 1) << 3) | (0x20 if cause_eio else 0)]


def sched_bytes(delay, period, handle=True, fail_on=0):
    return [D[delay] | ((1 << 4) if handle else 0), P[period]] + fail(fail_on)


def schedule(kind, delay="1ms", period="1ms", handle=True, fail_on=0,
             act_on=0, act=None):
    first = {"oneshot": 0, "rate": 56, "delay": 76}[kind]
    out = [first] + sched_bytes(delay, period, handle, fail_on)
    if act_on:
        out += [1 | ((act_on - 1) << 1)] + act
    else:
        out += [0]
    return out


def held(i, live=True):
    # (b & 3) != 0: among live held handles; index (b >> 2) % n
    return [(i << 2) | (1 if live else 0)]


def cancel(i, interrupt=False):
    return [100] + held(i) + [0x10 if interrupt else 0]


def rearm(i, delay):
    return [140] + held(i) + [D[delay]]


def advance(a):
    return [160, A[a]]


def release(i):
    return [212] + held(i, live=False) + [0]


def remove(i):
    return [226] + held(i, live=False) + [0]


def purge():
    return [236]


def policy(which, on):
    w = {"execute_delayed": 0, "continue_periodic": 1,
         "remove_on_cancel": 2}[which]
    # which = c % 3, on = (c >> 2) & 1
    c = next(c for c in range(256) if c % 3 == w and (c >> 2) & 1 == on)
    return [239, c]


def shutdown():
    return [254, 0]


def shutdown_now(with_list=True):
    return [255, 0, 1 if with_list else 0]


# Callback actions (m_gen_action).
def target_self():
    return [0]


def target_live(i):
    return [200, (i << 2) | 1]


def act_rearm(target, delay):
    return [0] + target + [D[delay]]


def act_cancel(target, interrupt=False):
    return [4 | (0x10 if interrupt else 0)] + target


def act_schedule(kind, delay, period, handle=True, fail_on=0):
    k = {"oneshot": 0, "rate": 1, "delay": 2}[kind]
    return [7 | (k << 4)] + sched_bytes(delay, period, handle, fail_on)


def act_advance(a):
    return [11 | (A[a] << 4)]


def act_shutdown():
    return [15]


def act_shutdown_now():
    return [15 | (3 << 4)]


# ---- sequences with loop bindings -------------------------------------
# With bindings (the third config byte asks for them) the decoder reads a
# few more bytes and gives loop operations some byte ranges of their own:
# top-level steps 100-105, 160-189 and 212-219 are loop steps, so cancel,
# advance and release use other bytes of their ranges here (l* helpers).
LIMIT = {"default": 0, 1: 1, 2: 2, 3: 3, 4: 4, 8: 5, 40: 6}


def lconfig(nloops=1, limits=("default", "default"), **kw):
    c = config(**kw)
    c[2] |= (1 if nloops == 1 else 3) << 2
    return c + [LIMIT[limits[0]] | (LIMIT[limits[1]] << 3)]


def lschedule(kind, delay="1ms", period="1ms", loop=0, handle=True,
              fail_on=0, act_on=0, act=None):
    """A timer of binding `loop`, or a pool task (loop=None)."""
    first = {"oneshot": 0, "rate": 56, "delay": 76}[kind]
    w = 7 if loop is None else loop << 3  # (w & 7) < 5: a binding's
    out = [first, w] + sched_bytes(delay, period, handle, fail_on)
    if act_on:
        out += [1 | ((act_on - 1) << 1)] + act
    else:
        out += [0]
    return out


def lpost(loop=0, handle=True, fail_on=0, act_on=0, act=None):
    out = [160, (loop << 7) | 56, 0x10 if handle else 0] + fail(fail_on)
    if act_on:
        out += [1 | ((act_on - 1) << 1)] + act
    else:
        out += [0]
    return out


def dispatch(loop=0):
    return [160, loop << 7]


TOUCH_AT = {"0": 0, "1ns": 2, "0.5ms": 3, "1ms": 4, "2ms": 5, "5ms": 6,
            "MAX": 7}


def touch_kind(at=None):
    # chime_task_touch, or chime_task_touch_at(now + at) ("MAX": INT64_MAX)
    return [7] if at is None else [TOUCH_AT[at] << 5]


def touch(i, loop=0, at=None):
    # the i-th live loop one-shot held
    return [160, (loop << 7) | 86, (i << 2) | 1] + touch_kind(at)


def lclose(loop=0):
    return [160, (loop << 7) | 126, 1]


def ladvance(a):
    return [200, A[a]]


def lcancel(i, interrupt=False):
    return [106] + held(i) + [0x10 if interrupt else 0]


def lrelease(i):
    return [220] + held(i, live=False) + [0]


# Callback actions with bindings: lact() wraps a plain one; the others are
# loop actions on the task's own binding or the other one.
def lact(act):
    return [3] + act


def _lact(kind, other):
    return [0, (1 if other else 0) | (kind << 2)]


def lact_post(other=False, handle=True, fail_on=0):
    return _lact(1 if handle else 0, other) + fail(fail_on)


def lact_touch(i, other=False, at=None):
    return _lact(16, other) + [(i << 2) | 1] + touch_kind(at)


def lact_dispatch(other=True):
    return [8 if other else 0, (1 if other else 0) | (30 << 2)]


def lact_schedule(kind, delay, period="1ms", other=False, handle=True):
    k = {"oneshot": 0, "rate": 1, "delay": 2}[kind]
    return _lact(48 + k, other) + sched_bytes(delay, period, handle)


def lact_close(other=False):
    return _lact(62, other)


CORPUS = {
    # Equal deadlines run in submission order; a re-arm to the same
    # deadline queues behind.
    "fifo_and_rearm": config() + schedule("oneshot", "2ms")
    + schedule("oneshot", "2ms") + schedule("oneshot", "1ms")
    + rearm(2, "2ms") + advance("2ms"),
    # Fixed rate catching up after a jump; fixed delay counting from the
    # end of a run that takes virtual time.
    "periodic_catch_up": config() + schedule("rate", "1ms", "2ms")
    + schedule("delay", "0", "3ms", act_on=1, act=act_advance("1ms"))
    + advance("10ms") + advance("3ms") + cancel(0) + advance("5ms"),
    # remove_on_cancel off: retained cancelled tasks, purge, remove.
    "retained_cancel": config(remove_on_cancel=False)
    + schedule("oneshot", "5ms") + schedule("oneshot", "8ms")
    + schedule("rate", "1ms", "4ms") + cancel(1) + cancel(0)
    + advance("1ms") + remove(1) + purge() + advance("5ms"),
    # A bounded queue evicting the task nearest its deadline.
    "discard_oldest": config(policy="discard_oldest", max_pending=2)
    + schedule("oneshot", "3ms") + schedule("oneshot", "1ms")
    + schedule("rate", "2ms", "2ms") + advance("3ms"),
    # The caller runs the callback when the queue is full.
    "caller_runs": config(policy="caller_runs", max_pending=1)
    + schedule("oneshot", "5ms") + schedule("oneshot", "1ms", fail_on=1)
    + schedule("rate", "1ms", "1ms") + advance("5ms"),
    # A callback shuts the pool down while a task due at the same instant
    # still waits; one-shots not yet due are cancelled.
    "shutdown_from_callback": config(exec_delayed=False)
    + schedule("oneshot", "1ms", act_on=1, act=act_shutdown())
    + schedule("oneshot", "1ms") + schedule("oneshot", "2ms")
    + schedule("rate", "1ms", "1ms") + advance("1ms") + advance("2ms"),
    # shutdown_now from a callback (interrupted) and from the test.
    "shutdown_now": config(cont_periodic=True)
    + schedule("rate", "1ms", "1ms", act_on=2, act=act_shutdown_now())
    + schedule("oneshot", "5ms") + advance("2ms") + shutdown_now(),
    # Callbacks re-arming and cancelling themselves and each other,
    # including a running one-shot re-armed (runs again).
    "self_rearm_cancel": config()
    + schedule("oneshot", "1ms", act_on=1, act=act_rearm(target_self(), "0"))
    + schedule("rate", "1ms", "1ms", act_on=2,
               act=act_cancel(target_self(), interrupt=True))
    + schedule("oneshot", "3ms", act_on=1,
               act=act_rearm(target_live(0), "5ms"))
    + advance("3ms") + advance("5ms"),
    # Saturation: a clock near INT64_MAX, MAX delays and periods.
    "saturation": config(start="nearmax") + schedule("oneshot", "MAX")
    + schedule("rate", "0", "MAX") + schedule("delay", "MAX-1", "MAX")
    + schedule("oneshot", "MAX") + advance("25ms") + rearm(0, "MAX"),
    # Graceful shutdown with periodic tasks continuing, then a policy
    # turned off after shutdown.
    "shutdown_policies": config(cont_periodic=True)
    + schedule("rate", "1ms", "2ms") + schedule("oneshot", "4ms")
    + schedule("delay", "1ms", "1ms", fail_on=3) + shutdown()
    + advance("3ms") + policy("continue_periodic", False) + advance("5ms"),
    # Failures: a periodic task failing on its second run, a nested
    # submission, invalid periods.
    "failures": config(start="0") + schedule("rate", "1ms", "1ms", fail_on=2)
    + schedule("oneshot", "1ms", act_on=1,
               act=act_schedule("delay", "1ms", "2ms", fail_on=1))
    + schedule("rate", "1ms", "0") + schedule("delay", "1ms", "-1ms")
    + advance("5ms") + release(0) + advance("5ms"),
    # ---- loop bindings ----
    # Equal deadlines in (deadline, submission) order per binding; a post
    # joins behind the timers already due; a re-arm to the same deadline
    # queues behind.
    "loop_fifo_post": lconfig() + lschedule("oneshot", "2ms")
    + lschedule("oneshot", "2ms") + lschedule("oneshot", "1ms")
    + ladvance("2ms") + lpost() + rearm(0, "0") + dispatch()
    + lschedule("oneshot", "1ms") + lpost() + ladvance("1ms") + dispatch(),
    # batch_limit 1: the ready queue fills; a touch sends a ready timer
    # back, a cancel and a re-arm take ready ones away.
    "loop_batch_limit": lconfig(limits=(1, "default"))
    + lschedule("oneshot", "1ms") + lschedule("oneshot", "2ms")
    + lschedule("oneshot", "3ms") + lschedule("oneshot", "4ms")
    + ladvance("5ms") + dispatch() + touch(0) + lcancel(1) + rearm(2, "1ms")
    + dispatch() + dispatch() + ladvance("5ms") + dispatch() + dispatch(),
    # A late fixed-rate timer catching up over batch-limited dispatches; a
    # fixed-delay one whose run moves the clock.
    "loop_periodic": lconfig(limits=(3, "default"))
    + lschedule("rate", "1ms", "1ms")
    + lschedule("delay", "0", "3ms", act_on=1, act=lact(act_advance("1ms")))
    + ladvance("8ms") + dispatch() + dispatch() + dispatch() + dispatch()
    + ladvance("5ms") + dispatch() + lcancel(0) + dispatch(),
    # Two bindings: a callback of one dispatches the other (nested), which
    # touches and re-arms timers of the first.
    "loop_nested_dispatch": lconfig(nloops=2)
    + lschedule("oneshot", "3ms", loop=0)
    + lschedule("oneshot", "2ms", loop=1, act_on=1, act=lact_touch(0))
    + lschedule("oneshot", "2ms", loop=0, act_on=1, act=lact_dispatch())
    + lschedule("oneshot", "1ms", loop=1, act_on=1,
                act=lact(act_rearm(target_live(0), "0")))
    + ladvance("2ms") + dispatch(0) + ladvance("3ms") + dispatch(0)
    + dispatch(1),
    # Shutdown from a loop callback while a periodic timer of the same
    # dispatch waits; execute_delayed off cancels a one-shot not yet due,
    # a due one still runs; posts are rejected after.
    "loop_shutdown": lconfig(exec_delayed=False, policy="discard")
    + lschedule("oneshot", "1ms", act_on=1, act=lact(act_shutdown()))
    + lschedule("rate", "1ms", "1ms") + lschedule("oneshot", "1ms")
    + lschedule("oneshot", "5ms") + ladvance("1ms") + dispatch() + lpost()
    + dispatch() + ladvance("5ms") + dispatch(),
    # Touch: an idle timeout pushed back twice, then left to expire.
    "loop_touch": lconfig() + lschedule("oneshot", "5ms")
    + ladvance("3ms") + touch(0) + ladvance("3ms") + dispatch()
    + touch(0, at="1ms") + ladvance("3ms") + dispatch() + ladvance("3ms")
    + dispatch(),
    # Pool and loop: a pool callback posts to the binding and touches a
    # loop timer; a loop callback moves the clock (the worker runs a pool
    # task meanwhile) and schedules a pool task.
    "loop_pool_mix": lconfig()
    + lschedule("oneshot", "2ms", loop=None, act_on=1,
                act=lact_post(fail_on=1))
    + lschedule("oneshot", "8ms", loop=0)
    + lschedule("oneshot", "1ms", loop=None, act_on=1, act=lact_touch(0))
    + lschedule("oneshot", "3ms", loop=0, act_on=1,
                act=lact(act_advance("1ms")))
    + lschedule("oneshot", "4ms", loop=None)
    + ladvance("3ms") + dispatch() + ladvance("5ms") + dispatch(),
    # A loop callback closes its own binding; later posts and dispatches
    # are refused. DISCARD_OLDEST with loop timers at capacity.
    "loop_close": lconfig(policy="discard_oldest", max_pending=2)
    + lschedule("oneshot", "3ms") + lschedule("oneshot", "1ms", loop=None)
    + lschedule("oneshot", "2ms")
    + lschedule("oneshot", "1ms", act_on=1, act=lact_close())
    + lpost() + ladvance("1ms") + dispatch() + lpost() + dispatch()
    + lclose(),
    # remove_on_cancel off: a cancelled loop timer stays until a move
    # finds it due; remove and purge meet it.
    "loop_retained_cancel": lconfig(remove_on_cancel=False)
    + lschedule("oneshot", "2ms") + lschedule("oneshot", "4ms")
    + lschedule("oneshot", "8ms") + lcancel(0) + lcancel(0) + remove(1)
    + ladvance("2ms") + dispatch() + purge() + ladvance("5ms") + dispatch(),
}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.join(here, "corpus")
    os.makedirs(out, exist_ok=True)
    for name, data in sorted(CORPUS.items()):
        assert all(0 <= b < 256 for b in data), name
        with open(os.path.join(out, name), "wb") as f:
            f.write(bytes(data))
        print(f"{name}: {len(data)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
