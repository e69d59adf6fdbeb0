// The harness's device hold (hold.py): a kernel that fills every SM of the GPU and spins until the
// host opens a gate in pinned memory (or a timeout passes), so the forward pass queued behind it on
// the same stream runs only after the host has finished queueing it. The timed region then holds the
// device's work alone, not the host's path to the first launch.
//
// Every SM is filled to its thread limit while the gate is shut, so a kernel the solution sends to
// another stream cannot start before the clock does: it waits for an SM like the work behind the hold.
#include <cuda_runtime.h>
#include <stdint.h>
#include <time.h>

namespace {

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Host-visible state, in one pinned and mapped block.
struct HoldState {
  volatile int32_t gate;       // the generation the host has released
  int32_t arrived;             // the grid's size once every block is resident, this generation
  int32_t timed_out;           // a block gave up waiting, this generation
  int32_t pad;
};

// Blocks count their arrival in device memory; the last one tells the host, with one write over the
// bus (a system-scope atomic from every block, to pinned host memory, took about half a millisecond
// on an H100: longer than the kernels it holds for). The last one also resets the count for the
// next hold, which queues behind this one.
__device__ int32_t g_arrivals = 0;

__global__ void hold_kernel(HoldState* state, int32_t generation, uint64_t timeout_ns) {
  if (threadIdx.x == 0) {
    if (atomicAdd(&g_arrivals, 1) == static_cast<int32_t>(gridDim.x) - 1) {
      g_arrivals = 0;
      atomicExch_system(&state->arrived, static_cast<int32_t>(gridDim.x));
    }
    const uint64_t start = global_ns();
    while (state->gate != generation) {
      if (global_ns() - start > timeout_ns) {
        atomicExch_system(&state->timed_out, 1);
        break;
      }
      __nanosleep(256);
    }
  }
  __syncthreads();   // the block's other threads keep their slots on the SM until the gate opens
}

HoldState* g_state = nullptr;   // host pointer
HoldState* g_device = nullptr;  // the same memory, as the device sees it
int32_t g_generation = 0;
int g_blocks = 0;
int g_threads = 0;

}  // namespace

extern "C" {

// Allocates the state and sizes the grid for the current device: as many blocks per SM as its thread
// limit allows (checked with the occupancy calculator). Returns 0, or a CUDA error code.
int cah_init(void) {
  cudaError_t err;
  int device = 0;
  if ((err = cudaGetDevice(&device)) != cudaSuccess) return err;
  cudaDeviceProp prop;
  if ((err = cudaGetDeviceProperties(&prop, device)) != cudaSuccess) return err;
  if (g_state == nullptr) {
    void* host = nullptr;
    if ((err = cudaHostAlloc(&host, sizeof(HoldState), cudaHostAllocMapped)) != cudaSuccess) return err;
    void* dev = nullptr;
    if ((err = cudaHostGetDevicePointer(&dev, host, 0)) != cudaSuccess) return err;
    g_state = static_cast<HoldState*>(host);
    g_device = static_cast<HoldState*>(dev);
    g_state->gate = 0;
    g_state->arrived = 0;
    g_state->timed_out = 0;
  }
  g_threads = prop.maxThreadsPerBlock < prop.maxThreadsPerMultiProcessor ? prop.maxThreadsPerBlock
                                                                          : prop.maxThreadsPerMultiProcessor;
  int per_sm = 0;
  if ((err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, hold_kernel, g_threads, 0)) != cudaSuccess)
    return err;
  int wanted = prop.maxThreadsPerMultiProcessor / g_threads;
  if (per_sm < wanted) return -1;   // the kernel cannot fill an SM's thread slots: refuse to hold
  g_blocks = prop.multiProcessorCount * wanted;
  return 0;
}

int cah_blocks(void) { return g_blocks; }
int cah_threads(void) { return g_threads; }

// Queues the hold on `stream` (a cudaStream_t). Returns 0, or a CUDA error code.
int cah_hold(void* stream, uint64_t timeout_ns) {
  g_generation += 1;
  g_state->arrived = 0;
  g_state->timed_out = 0;
  __sync_synchronize();
  hold_kernel<<<g_blocks, g_threads, 0, static_cast<cudaStream_t>(stream)>>>(g_device, g_generation, timeout_ns);
  return cudaGetLastError();
}

// Waits (spinning) until every block of the hold is resident, at most `limit_ns`; 1 when they are.
int cah_wait_resident(uint64_t limit_ns) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  const uint64_t until = now.tv_sec * 1000000000ull + now.tv_nsec + limit_ns;
  while (__atomic_load_n(&g_state->arrived, __ATOMIC_ACQUIRE) < g_blocks) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec * 1000000000ull + now.tv_nsec > until) return 0;
  }
  return 1;
}

void cah_release(void) {
  __sync_synchronize();
  g_state->gate = g_generation;
  __sync_synchronize();
}

int cah_timed_out(void) { return __atomic_load_n(&g_state->timed_out, __ATOMIC_ACQUIRE); }

}  // extern "C"
