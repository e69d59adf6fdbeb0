// LayerNorm over the last D elements of each row (D = 64*256*256 here): rows are long, so each
// row is split over many blocks. Pass 1: per-block partial sums (float4 loads, warp shuffles).
// Pass 2: one warp per row combines the partials in double into mean and 1/std.
// Pass 3: y = (x - mean) * rstd * w + b with float4 loads/stores.
#include <cuda_runtime.h>

constexpr int THREADS = 256;

__device__ inline float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}

__global__ void partial_sums(const float4* __restrict__ x, float2* __restrict__ partials, long d4, int blocks_per_row) {
    int row = blockIdx.y, part = blockIdx.x;
    const float4* xr = x + (long)row * d4;
    long chunk = (d4 + blocks_per_row - 1) / blocks_per_row;
    long start = part * chunk, end = min(d4, start + chunk);
    float s = 0.f, ss = 0.f;
    for (long i = start + threadIdx.x; i < end; i += THREADS) {
        float4 v = xr[i];
        s += v.x + v.y + v.z + v.w;
        ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    __shared__ float sh_s[THREADS / 32], sh_ss[THREADS / 32];
    s = warp_sum(s); ss = warp_sum(ss);
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) { sh_s[warp] = s; sh_ss[warp] = ss; }
    __syncthreads();
    if (warp == 0) {
        s = lane < THREADS / 32 ? sh_s[lane] : 0.f;
        ss = lane < THREADS / 32 ? sh_ss[lane] : 0.f;
        s = warp_sum(s); ss = warp_sum(ss);
        if (lane == 0) partials[(long)row * blocks_per_row + part] = make_float2(s, ss);
    }
}

__global__ void row_stats(const float2* __restrict__ partials, float2* __restrict__ stats, int blocks_per_row,
                          long d, float eps) {
    int row = blockIdx.x, lane = threadIdx.x;
    double s = 0.0, ss = 0.0;
    for (int i = lane; i < blocks_per_row; i += 32) {
        float2 p = partials[(long)row * blocks_per_row + i];
        s += p.x; ss += p.y;
    }
    for (int o = 16; o > 0; o >>= 1) {
        s += __shfl_xor_sync(0xffffffff, s, o);
        ss += __shfl_xor_sync(0xffffffff, ss, o);
    }
    if (lane == 0) {
        double mean = s / d, var = ss / d - mean * mean;
        stats[row] = make_float2((float)mean, (float)(1.0 / sqrt(var + eps)));
    }
}

__global__ void normalize(const float4* __restrict__ x, const float4* __restrict__ w, const float4* __restrict__ b,
                          const float2* __restrict__ stats, float4* __restrict__ y, long d4, long total4) {
    for (long i = blockIdx.x * (long)THREADS + threadIdx.x; i < total4; i += (long)gridDim.x * THREADS) {
        long row = i / d4, j = i - row * d4;
        float2 st = stats[row];
        float4 v = x[i], ww = w[j], bb = b[j];
        v.x = (v.x - st.x) * st.y * ww.x + bb.x;
        v.y = (v.y - st.x) * st.y * ww.y + bb.y;
        v.z = (v.z - st.x) * st.y * ww.z + bb.z;
        v.w = (v.w - st.x) * st.y * ww.w + bb.w;
        y[i] = v;
    }
}

// `work` holds rows * blocks_per_row float2 partials followed by rows float2 stats.
extern "C" int layernorm_launch(const float* x, const float* w, const float* b, float* y, float* work,
                                int rows, long d, int blocks_per_row, float eps, int sms, cudaStream_t s) {
    long d4 = d / 4;
    float2* partials = reinterpret_cast<float2*>(work);
    float2* stats = partials + (long)rows * blocks_per_row;
    partial_sums<<<dim3(blocks_per_row, rows), THREADS, 0, s>>>(reinterpret_cast<const float4*>(x), partials, d4,
                                                                 blocks_per_row);
    row_stats<<<rows, 32, 0, s>>>(partials, stats, blocks_per_row, d, eps);
    normalize<<<sms * 8, THREADS, 0, s>>>(reinterpret_cast<const float4*>(x), reinterpret_cast<const float4*>(w),
                                          reinterpret_cast<const float4*>(b), stats, reinterpret_cast<float4*>(y),
                                          d4, d4 * rows);
    return (int)cudaGetLastError();
}
