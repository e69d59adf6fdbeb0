// The kernel: plain C++, no torch headers, so an edit here recompiles in well under a second.
// One pass over the sequence with a running sum per channel: O(T C) instead of the reference's
// O(T^2 C) matrix multiply. The inner loop runs over contiguous channels, so it vectorises.
#include <algorithm>
#include <cstdint>
#include <vector>

extern "C" void running_mean_launcher(const float* x, float* out, int64_t batch, int64_t steps, int64_t channels) {
    std::vector<float> sum(channels);
    for (int64_t b = 0; b < batch; ++b) {
        std::fill(sum.begin(), sum.end(), 0.f);
        for (int64_t t = 0; t < steps; ++t) {
            const float inv = 1.f / static_cast<float>(t + 1);
            const float* row = x + (b * steps + t) * channels;
            float* dst = out + (b * steps + t) * channels;
            for (int64_t c = 0; c < channels; ++c) {
                sum[c] += row[c];
                dst[c] = sum[c] * inv;
            }
        }
    }
}
