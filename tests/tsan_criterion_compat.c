/* SPDX-License-Identifier: MIT */
/* Linked into the test executables of TSan builds only.
 *
 * Criterion (through BoxFort, which Debian links into libcriterion) places
 * its inheritable arena at a random address in [0x2000'0000'0000,
 * 0x7f00'0000'0000), probing with mincore() and then mapping it with
 * mmap64(MAP_FIXED). Under ThreadSanitizer almost all of that range is
 * TSan's reserved shadow/meta memory: the probe always finds it "mapped" and
 * Criterion aborts with "Could not initialize inheritable arena" (Criterion
 * issue #274, open since 2018). We cannot run the suite under TSan without
 * working around it, so:
 *   - mincore() reports the reserved gaps as unmapped, and
 *   - mmap64(MAP_FIXED) aimed at such a gap is turned into a plain hint
 *     inside TSan's application range for PIE mappings
 *     [0x5500'0000'0000, 0x5680'0000'0000), which BoxFort accepts because
 *     the result still lies within its range.
 * Only libcriterion calls mmap64/mincore in these processes (TSan maps its
 * own memory with raw syscalls); every other call passes straight to TSan's
 * interceptors. The ranges are those of GCC 12's libtsan on x86_64 (Debian
 * 12), the platform CI runs on.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/types.h>

#define BXF_LO UINT64_C(0x200000000000)
#define BXF_HI UINT64_C(0x7f0000000000)
#define APP_LO UINT64_C(0x550000000000)
#define APP_HI UINT64_C(0x568000000000)

void *__interceptor_mmap64(void *addr, size_t len, int prot, int flags, int fd,
                           off_t off);
int __interceptor_mincore(void *addr, size_t len, unsigned char *vec);

static int
in_reserved_gap(uintptr_t a)
{
    return a >= BXF_LO && a < BXF_HI && !(a >= APP_LO && a < APP_HI);
}

int
mincore(void *addr, size_t len, unsigned char *vec)
{
    if (in_reserved_gap((uintptr_t)addr)) {
        errno = ENOMEM;
        return -1;
    }
    return __interceptor_mincore(addr, len, vec);
}

void *
mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    if ((flags & MAP_FIXED) && in_reserved_gap((uintptr_t)addr)) {
        /* One arena per process in practice; step the hint so a second
         * one would not collide with the first. Single-threaded: Criterion
         * sets its arena up before any test runs. */
        static uintptr_t next = APP_LO + UINT64_C(0x10000000000);
        void *hint = (void *)next;
        next += UINT64_C(0x100000000);
        return __interceptor_mmap64(hint, len, prot, flags & ~MAP_FIXED, fd,
                                    off);
    }
    return __interceptor_mmap64(addr, len, prot, flags, fd, off);
}
