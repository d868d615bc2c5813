/* SPDX-License-Identifier: MIT */
/* chime + libevent: run a binding's callbacks on an event_base's thread.
 *
 * Installed and built only with libevent (library chime::event, pkg-config
 * module chime-event). Workers never call libevent: no
 * evthread_use_pthreads() and no BEV_OPT_THREADSAFE are needed, because
 * every callback of the binding runs inside the base's own loop.
 *
 * Which libevent: the application's. libchime_event links no libevent of
 * its own (no DT_NEEDED entry, and chime-event.pc names none): its four
 * libevent calls (event_new, event_add, event_del, event_free) bind to
 * the libevent the application links, -levent or -levent_core, so the
 * process loads one libevent and one copy of its global state
 * (evthread_use_pthreads(), event_set_mem_functions()...). Link one:
 *   cc app.c $(pkg-config --cflags --libs chime-event libevent_core)
 *   cc app.c $(pkg-config --cflags --libs chime-event libevent)
 *   target_link_libraries(app PRIVATE chime::event <your libevent target>)
 * Without one the link fails with undefined references to event_new and
 * the like in libchime_event. (libevent 2.1's libevent_pthreads itself
 * needs libevent_core: an application linking -levent -levent_pthreads
 * loads both whatever chime does; -levent_core -levent_extra
 * -levent_pthreads loads one copy.) Do not link libchime_event itself with
 * -Wl,--no-undefined or -Wl,-z,defs (its libevent symbols are undefined
 * by design). This header needs no libevent header (it declares
 * struct event_base).
 *
 * Order of teardown (each step on the loop thread):
 *   1. chime_event_detach()  - unregisters the event, closes the binding
 *      (its pending tasks complete as cancelled);
 *   2. event_base_free()     - the base may go once no chime event is on it;
 *   3. chime_pool_destroy()  - after every binding of the pool is closed
 *      (it returns -EBUSY otherwise).
 */
#ifndef CHIME_EVENT_H
#define CHIME_EVENT_H

#include "chime/chime.h"

#ifdef __cplusplus
extern "C" {
#endif

struct event_base;

typedef struct chime_event chime_event;

/* Creates a binding on pool for base and registers a persistent read event
 * on its readiness fd whose callback runs chime_loop_dispatch(). The thread
 * that runs the base becomes the binding's loop thread at its first
 * dispatch. opts NULL: defaults.
 * Returns: 0, -EINVAL (NULL argument), -ENOMEM, -EIO (libevent refused the
 * event), or chime_loop_new()'s errors.
 * Thread-safety: any thread, before the base runs; else the loop thread.
 * Runs on: the base's loop thread (every callback of the binding). */
CHIME_EXPORT int chime_event_attach(chime_pool *pool, struct event_base *base,
                                    const chime_loop_options *opts,
                                    chime_event **out);

/* The binding, to post and schedule loop work with chime_loop_*().
 * NULL for NULL. Thread-safety: any thread. */
CHIME_EXPORT chime_loop *chime_event_loop(chime_event *ev);

/* Unregisters the event and closes the binding (see chime_loop_close),
 * then frees ev. detach(NULL) is a no-op. Returns 0 or chime_loop_close()'s
 * error (then nothing is done).
 * Thread-safety: the loop thread, or any thread while the base is not
 * running. */
CHIME_EXPORT int chime_event_detach(chime_event *ev);

#ifdef __cplusplus
}
#endif

#endif /* CHIME_EVENT_H */
