// One 64-bit hash per 256-byte block of device memory: the replayer compares them before and
// after each call of a hot body to find which bytes the call wrote (dataflow.rs).
// Regenerate blockhash.ptx with scripts/gen-blockhash-ptx.sh after editing.
//
// One warp per block: lane i reads word i (a coalesced 256-byte load), mixes it with its index,
// and the warp sums the mixes. A trailing partial block hashes the words it has.
extern "C" __global__ void gpuless_block_hash(const unsigned long long *__restrict__ words,
                                              unsigned long long n_words,
                                              unsigned long long *__restrict__ out) {
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
    if (lane == 0) out[warp] = h;
}
