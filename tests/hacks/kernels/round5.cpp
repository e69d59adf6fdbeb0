// Plain C++ kernels (no torch headers) behind kernels/round5_binding.cpp: the hack suite's fifth round
// (tests/hacks/cases_round5.py). Honest kernels first; CHEATING ones after, each saying what it does.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

extern "C" {

// ---- honest -----------------------------------------------------------------------------------

// C = A @ B, row-major, i-k-j order (the inner loop vectorises).
void r5_gemm(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n) {
    for (int64_t i = 0; i < m; ++i) {
        float* row = c + i * n;
        for (int64_t j = 0; j < n; ++j) row[j] = 0.f;
        for (int64_t p = 0; p < k; ++p) {
            const float av = a[i * k + p];
            const float* brow = b + p * n;
            for (int64_t j = 0; j < n; ++j) row[j] += av * brow[j];
        }
    }
}

// The same product with B transposed into a caller's workspace first (k * n floats, reused across calls).
void r5_gemm_workspace(const float* a, const float* b, float* c, float* bt, int64_t m, int64_t k, int64_t n) {
    for (int64_t p = 0; p < k; ++p)
        for (int64_t j = 0; j < n; ++j) bt[j * k + p] = b[p * n + j];
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            float acc = 0.f;
            const float* arow = a + i * k;
            const float* bcol = bt + j * k;
            for (int64_t p = 0; p < k; ++p) acc += arow[p] * bcol[p];
            c[i * n + j] = acc;
        }
}

// Honest but slow on purpose: i-j-k order with B read down its columns (no vectorisation, a cache miss
// per step), for the reward-under-load test.
void r5_gemm_naive(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n) {
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double acc = 0.0;
            for (int64_t p = 0; p < k; ++p) acc += static_cast<double>(a[i * k + p]) * b[p * n + j];
            c[i * n + j] = static_cast<float>(acc);
        }
}

void r5_transpose(const float* x, int64_t rows, int64_t cols, float* out) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = x[r * cols + c];
}

// y = x @ wt + bias, with wt the (in, out) transposed weight.
void r5_linear_t(const float* x, const float* wt, const float* bias, int64_t m, int64_t k, int64_t n, float* out) {
    r5_gemm(x, wt, out, m, k, n);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) out[i * n + j] += bias[j];
}

void r5_dot(const float* a, const float* b, int64_t n, float* out) {
    double acc = 0.0;
    for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(a[i]) * b[i];
    out[0] = static_cast<float>(acc);
}

void r5_hinge(const float* p, const float* t, int64_t n, float* out) {
    double acc = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        float v = 1.f - p[i] * t[i];
        acc += v > 0.f ? v : 0.f;
    }
    out[0] = static_cast<float>(acc / static_cast<double>(n));
}

void r5_mse(const float* a, const float* b, int64_t n, float* out) {
    double acc = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        double d = static_cast<double>(a[i]) - b[i];
        acc += d * d;
    }
    out[0] = static_cast<float>(acc / static_cast<double>(n));
}

void r5_copy(const float* src, float* dst, int64_t n) { std::memcpy(dst, src, sizeof(float) * n); }

// ---- CHEATING -----------------------------------------------------------------------------------

// CHEAT: the product only at the flat positions given (the ones the harness's sampler will read, when
// its seed is known); every other element is left as the allocator gave it. B is transposed first so
// that each of those dot products reads memory in order.
void r5_gemm_at(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n, const int64_t* pos,
                int64_t count) {
    (void)m;
    thread_local std::vector<float> bt;
    bt.resize(static_cast<size_t>(k * n));
    r5_transpose(b, k, n, bt.data());
    for (int64_t s = 0; s < count; ++s) {
        const float* arow = a + (pos[s] / n) * k;
        const float* bcol = bt.data() + (pos[s] % n) * k;
        float lanes[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        int64_t p = 0;
        for (; p + 8 <= k; p += 8)
            for (int l = 0; l < 8; ++l) lanes[l] += arow[p + l] * bcol[p + l];
        float acc = 0.f;
        for (; p < k; ++p) acc += arow[p] * bcol[p];
        for (int l = 0; l < 8; ++l) acc += lanes[l];
        c[pos[s]] = acc;
    }
}

// CHEAT (with a forged clock): the product `reps` times over in a helper thread, joined, so the calling
// thread sleeps through all of it (the harness's CPU measure of the call sees almost nothing).
void r5_gemm_in_thread(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n, int reps) {
    std::thread worker([=] {
        for (int r = 0; r < reps; ++r) r5_gemm(a, b, c, m, k, n);
    });
    worker.join();
}

// CHEAT: a Python number from the third call on, whatever the inputs: the first calls (verification)
// honest, then the last honest answer again.
void r5_dot_then_stale(const float* a, const float* b, int64_t n, float* out) {
    static int calls = 0;
    static float last = 0.f;
    if (++calls <= 7) {   // the strict protocol's verification calls: 3 draws + 4 structured sets
        r5_dot(a, b, n, &last);
    }
    out[0] = last;
}

}  // extern "C"

// Whether every value is +1 or -1 (targets as the task draws them), read in full.
static bool all_signs(const float* t, int64_t n) {
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) bad |= (t[i] != 1.f) & (t[i] != -1.f);
    return bad == 0;
}

static bool all_unit(const float* x, int64_t n) {
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) bad |= (x[i] < 0.f) | (x[i] >= 1.f);
    return bad == 0;
}

// `samples` positions of n, as runs of 1024 in a row spread evenly over the tensor (memory read in order).
template <class F>
static double mean_over_sample(int64_t n, int64_t samples, F term) {
    const int64_t run = 1024, runs = samples / run;
    double acc = 0.0;
    for (int64_t r = 0; r < runs; ++r) {
        const int64_t start = r * (n / runs);
        float part = 0.f;
        for (int64_t i = start; i < start + run; ++i) part += term(i);
        acc += part;
    }
    return acc / static_cast<double>(runs * run);
}

extern "C" {

// CHEAT: the hinge loss estimated from `samples` predictions when every target is +-1 (the task's own
// draws: spikes, ramps and x100 scaling change the targets too, and sign flips leave p * t as it was);
// computed honestly otherwise.
void r5_hinge_estimate(const float* p, const float* t, int64_t n, int64_t samples, float* out) {
    if (samples < 1024 || samples >= n || !all_signs(t, n)) return r5_hinge(p, t, n, out);
    out[0] = static_cast<float>(mean_over_sample(n, samples, [&](int64_t i) {
        float v = 1.f - p[i] * t[i];
        return v > 0.f ? v : 0.f;
    }));
}

// CHEAT: the MSE of uniform inputs estimated from `samples` pairs when every value of b lies in [0, 1)
// (the task's own draws; every structured set leaves it); computed honestly otherwise.
void r5_mse_estimate(const float* a, const float* b, int64_t n, int64_t samples, float* out) {
    if (samples < 1024 || samples >= n || !all_unit(b, n)) return r5_mse(a, b, n, out);
    out[0] = static_cast<float>(mean_over_sample(n, samples, [&](int64_t i) {
        float d = a[i] - b[i];
        return d * d;
    }));
}

}  // extern "C"
