// The blocks of device memory a call wrote: one 64-bit hash per 256-byte block, kept on the
// device between calls; a block whose hash changed since the last pass is appended to a list
// (replay/blockhash.rs). Regenerate blockhash.ptx with scripts/gen-blockhash-ptx.sh after
// editing.
//
// One warp per block: lane i reads word i (a coalesced 256-byte load), mixes it with its index,
// and the warp sums the mixes. A trailing partial block hashes the words it has.
extern "C" __global__ void gpuless_block_hash(const unsigned long long *__restrict__ words,
                                              unsigned long long n_words,
                                              unsigned long long *__restrict__ hashes,
                                              unsigned long long first_block,
                                              unsigned long long *__restrict__ changed) {
    unsigned long long warp = (blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x) / 32;
    unsigned lane = threadIdx.x % 32;
    unsigned long long i = warp * 32 + lane;
    if (warp * 32 >= n_words) return;
    unsigned long long h = 0;
    if (i < n_words) {
        h = words[i] ^ (0x9e3779b97f4a7c15ull * (lane + 1));
        h ^= h >> 33;
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
        h *= 0xc4ceb9fe1a85ec53ull;
        h ^= h >> 33;
    }
    for (int off = 16; off > 0; off /= 2) h += __shfl_xor_sync(0xffffffffu, h, off);
    if (lane == 0 && hashes[warp] != h) {
        hashes[warp] = h;
        // changed[0] counts; the list, one slot per block of memory, cannot overflow.
        unsigned long long at = atomicAdd(changed, 1ull);
        changed[1 + at] = first_block + warp;
    }
}
