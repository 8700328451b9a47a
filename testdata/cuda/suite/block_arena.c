// A preload library for the GPU suite's "address range taken" check: before main (and so before
// cuInit), it maps PROT_NONE memory over the address range where gpuless's arena lives, so that
// a replay cannot re-reserve the recorder's arena and must fall back to translating pointers.
//
//   GPULESS_BLOCK_AT   start address, hex (default 0x640000000000, the recorder's default base)
//   GPULESS_BLOCK_SIZE bytes, decimal or hex (default 1 TiB: the whole default arena)
//
// Prints one line on stderr saying what it took (or why it could not).
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

__attribute__((constructor)) static void block_arena(void) {
    const char* at_s = getenv("GPULESS_BLOCK_AT");
    const char* size_s = getenv("GPULESS_BLOCK_SIZE");
    unsigned long long at = at_s ? strtoull(at_s, NULL, 16) : 0x640000000000ull;
    unsigned long long size = size_s ? strtoull(size_s, NULL, 0) : (1ull << 40);
    void* p = mmap((void*)at, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
                   -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "block_arena: could not map %#llx..%#llx: %s\n", at, at + size, strerror(errno));
    } else if ((unsigned long long)p != at) {
        fprintf(stderr, "block_arena: the kernel placed the block at %p instead of %#llx\n", p, at);
    } else {
        fprintf(stderr, "block_arena: %#llx..%#llx taken (PROT_NONE)\n", at, at + size);
    }
}
