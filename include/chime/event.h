/* SPDX-License-Identifier: MIT */
/**
 * @file event.h
 * @brief chime + libevent: run a binding's callbacks on an event_base's
 * thread (chime-event(3)).
 *
 * Installed and built only with libevent (library chime::event, pkg-config
 * module chime-event).
 */
#ifndef CHIME_EVENT_H
#define CHIME_EVENT_H

#include "chime/chime.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @defgroup chime-event The libevent binding
 * @brief chime_event: a loop binding (chime-loop(3)) watched by a libevent
 * event_base, whose callbacks run on the base's loop thread.
 *
 * Workers never call libevent: no evthread_use_pthreads() and no
 * BEV_OPT_THREADSAFE are needed, because every callback of the binding runs
 * inside the base's own loop.
 *
 * @par Which libevent: the application's
 * libchime_event links no libevent of its own (no DT_NEEDED entry, and
 * chime-event.pc names none): its four libevent calls (event_new,
 * event_add, event_del, event_free) bind to the libevent the application
 * links, -levent or -levent_core, so the process loads one libevent and
 * one copy of its global state (evthread_use_pthreads(),
 * event_set_mem_functions()...). Link one:
 * @code
 * cc app.c $(pkg-config --cflags --libs chime-event libevent_core)
 * cc app.c $(pkg-config --cflags --libs chime-event libevent)
 * target_link_libraries(app PRIVATE chime::event <your libevent target>)
 * @endcode
 * Without one the link fails with undefined references to event_new and
 * the like in libchime_event. (libevent 2.1's libevent_pthreads itself
 * needs libevent_core: an application linking -levent -levent_pthreads
 * loads both whatever chime does; -levent_core -levent_extra
 * -levent_pthreads loads one copy.) Do not link libchime_event itself with
 * -Wl,--no-undefined or -Wl,-z,defs (its libevent symbols are undefined by
 * design). This header needs no libevent header (it declares struct
 * event_base).
 *
 * @par Naming the loop thread
 * A server that attaches on its main thread and runs each base on a thread
 * of its own names that thread at attach time: set chime_loop_options.thread
 * to its pthread_t (or call chime_loop_set_thread_id() on
 * chime_event_loop() before the thread runs its base). Without a name, the
 * first thread that runs the base's loop while the fd is readable becomes
 * the binding's loop thread for good.
 *
 * @par Order of teardown (each step on the loop thread)
 * 1. chime_event_detach(): unregisters the event, closes the binding (its
 *    pending tasks complete as cancelled);
 * 2. event_base_free(): the base may go once no chime event is on it;
 * 3. chime_pool_destroy(): after every binding of the pool is closed (it
 *    returns -EBUSY otherwise).
 * @{
 */

struct event_base;

/** A binding attached to a libevent event_base. Opaque. */
typedef struct chime_event chime_event;

/**
 * @brief Creates a binding on pool for base.
 *
 * Registers a persistent read event on the binding's readiness fd whose
 * callback runs chime_loop_dispatch(). The thread that runs the base
 * becomes the binding's loop thread at its first dispatch, unless
 * opts->thread names it now (see chime_loop_options).
 * @param pool The pool.
 * @param base The libevent base whose thread will run the callbacks.
 * @param opts Passed to chime_loop_new(); NULL: defaults.
 * @param out Receives the binding.
 * @retval 0 Success.
 * @retval -EINVAL A NULL argument.
 * @retval -ENOMEM Out of memory.
 * @retval -EIO libevent refused the event.
 * @return Or chime_loop_new()'s errors.
 * @par Thread-safety:
 * Any thread, before the base runs; else the loop thread.
 * @par Runs on:
 * The base's loop thread (every callback of the binding).
 */
CHIME_EXPORT int chime_event_attach(chime_pool *pool, struct event_base *base,
                                    const chime_loop_options *opts,
                                    chime_event **out);

/**
 * @brief The binding, to post and schedule loop work with chime_loop_*().
 * @return The binding; NULL for NULL.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT chime_loop *chime_event_loop(chime_event *ev);

/**
 * @brief Unregisters the event and closes the binding, then frees ev.
 *
 * See chime_loop_close(). detach(NULL) is a no-op. A binding already
 * closed with chime_loop_close() (by one of its callbacks, say) is fine:
 * detach still unregisters the event and frees ev. Detach from one of the
 * binding's own callbacks is allowed; ev is then freed when that dispatch
 * returns.
 * @retval 0 Success (or ev NULL).
 * @return Or chime_loop_close()'s error, -EPERM or -ECHILD (then nothing
 *         is done).
 * @par Thread-safety:
 * The loop thread, or any thread while the base is not running.
 */
CHIME_EXPORT int chime_event_detach(chime_event *ev);

/**
 * @brief Why the binding's event stopped watching it.
 *
 * The readiness fd stays readable while work is ready, so a dispatch that
 * cannot run would make the base spin at 100% CPU. When
 * chime_loop_dispatch() answers -EPERM (the base ran on another thread
 * than the binding's loop thread), -ECHILD (a forked child ran an
 * inherited base) or -ESHUTDOWN (the binding was closed with
 * chime_loop_close() rather than chime_event_detach()), or when one of the
 * binding's callbacks closed it, the adapter deletes its event for good: a
 * base with nothing else to do then returns from event_base_dispatch().
 * Only chime_event_detach() undoes that state.
 * @param ev The binding.
 * @retval 0 The event still watches the binding.
 * @retval -EPERM It stopped: the base ran on the wrong thread.
 * @retval -ECHILD It stopped: a forked child ran the base.
 * @retval -ESHUTDOWN It stopped: the binding was closed behind its back.
 * @retval -EINVAL ev is NULL.
 * @par Thread-safety:
 * The loop thread, or any thread while the base is not running.
 */
CHIME_EXPORT int chime_event_status(chime_event *ev);

/** @} */

#ifdef __cplusplus
}
#endif

#endif /* CHIME_EVENT_H */
