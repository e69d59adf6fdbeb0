// The runtime guard around the candidate's forward pass (loaded into the candidate process by the
// harness, before any candidate code; called through ctypes from guard.py).
//
// A global RecordFunction callback sees every operator that enters PyTorch's dispatcher, from any
// thread (std::thread and OpenMP workers included), whether it came from Python or from C++. It is
// present during every call, checked or timed alike, so no call can tell whether it is watched. While a forward runs ("recording"), it notes:
//   - builtin (aten/prims) operators outside the allowlist: rule torch-op (composite operators pass;
//     the operators they decompose into are judged instead);
//   - copies that read the memory of one of the forward's inputs (PyTorch moving the input's data
//     is the task done by allowed ops): rule data-movement. Judged by memory, not by tensor or
//     storage: a copy whose source's bytes overlap an input storage's bytes, so a tensor made over
//     the input's memory at another address (torch::from_blob) counts as the input. Copies that
//     convert dtype or device: torch-op;
//   - reads of its inputs' elements into Python (`_local_scalar_dense`: item(), float(), a storage's
//     elements) beyond kInputReads a call: rule data-movement (the forward's work done in Python);
//   - calls of operators registered by the solution (custom ops: a namespace that did not exist before
//     its code ran): counted, and the storages they take and return are "kernel storages", as are
//     those of calls into the compiled modules (noted from Python). The forward's outputs must live in
//     kernel storages.
// What decides a call's verdict is `report` (struct Report below): counters that only grow, read by
// the harness from outside this process (/proc/PID/mem) after every call, at an address it finds
// from the library's own symbol table and the process's mappings. No function here resets them.
// Built with -DNDEBUG like libtorch itself: RecordFunction's layout depends on it.
#include <ATen/record_function.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace {

enum class Kind { Allowed, Copy, Composite, Refused, Custom, Scalar };

// Input elements a call may read into Python (an input's scalar parameter, say): a forward that reads more
// is computing in Python from its inputs' values, its kernels a decoy.
constexpr int64_t kInputReads = 16;

struct State {
  std::mutex mu;
  std::unordered_set<std::string> allowed;
  std::unordered_set<std::string> copies;
  std::unordered_set<std::string> builtin_namespaces;
  std::vector<std::pair<uintptr_t, uintptr_t>> inputs;  // byte ranges [lo, hi) of this call's inputs' storages
  std::unordered_set<intptr_t> kernel;    // storages a kernel took or returned
  int64_t input_reads = 0;                // this call's reads of input elements into Python
  std::string violation;                  // "rule|message" of the current call's first one, empty if none
};

State& state() {
  static State* s = new State();  // never destroyed: callbacks may run during teardown
  return *s;
}

// The harness's record of every call (outside.py's GuardRecord reads it; keep the two layouts alike).
// Counters are over the whole process, never reset: a second cag_begin cannot wipe a violation.
struct Report {
  char magic[8];                // "CAGREC1\0"
  int64_t begins;               // calls begun (cag_begin)
  int64_t ends;                 // calls ended (cag_end)
  int64_t violations;           // operators refused (torch-op, data-movement)
  int64_t custom_calls;         // calls of the solution's custom operators (seen by the callback)
  int64_t extension_calls;      // calls into its compiled modules (counted by ExtensionProxy)
  int64_t outputs_checked;      // output tensors checked against the kernel storages (cag_check_outputs)
  int64_t outputs_foreign;      // of those, outputs no kernel produced
  int64_t ops_seen;             // operators seen while recording
  char rule[32];                // the first violation of the current call: its rule ...
  char op[152];                 // ... and its operator
};
static_assert(sizeof(Report) == 256, "the harness reads 256 bytes");

}  // namespace

extern "C" {
// Exported by name: the harness finds it in the library's dynamic symbol table.
__attribute__((visibility("default"))) Report cag_report = {{'C', 'A', 'G', 'R', 'E', 'C', '1', 0}};
}

namespace {

std::atomic<bool> recording{false};
// Python switches recording with a plain one-byte store at this address (cag_recording_address):
// inside the timed region, a store costs nanoseconds where a ctypes call costs microseconds.
static_assert(sizeof(std::atomic<bool>) == 1 && std::atomic<bool>::is_always_lock_free,
              "recording must be one lock-free byte");
std::atomic<int64_t> ops_seen{0};
at::CallbackHandle handle = 0;

struct Ctx : at::ObserverContext {
  Kind kind;
  bool from_kernel = false;
  c10::ScalarType src_dtype = c10::ScalarType::Undefined;  // inputs() is valid in the start callback only
  explicit Ctx(Kind k) : kind(k) {}
};

intptr_t storage_of(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage()) return 0;
  return reinterpret_cast<intptr_t>(t.storage().data());
}

// The bytes a tensor's elements occupy, [lo, hi); false when it has none (empty, no storage).
bool extent_of(const at::Tensor& t, uintptr_t& lo, uintptr_t& hi) {
  try {
    if (!t.defined() || !t.has_storage() || t.numel() == 0 || t.storage().data() == nullptr) return false;
    const int64_t item = static_cast<int64_t>(t.element_size());
    int64_t low = t.storage_offset(), high = t.storage_offset();
    for (int64_t d = 0; d < t.dim(); ++d) {
      int64_t reach = (t.size(d) - 1) * t.stride(d);
      (reach < 0 ? low : high) += reach;
    }
    auto base = reinterpret_cast<uintptr_t>(t.storage().data());
    lo = base + static_cast<uintptr_t>(low * item);
    hi = base + static_cast<uintptr_t>((high + 1) * item);
    return true;
  } catch (...) {   // symbolic or nested shapes: nothing to compare
    return false;
  }
}

bool overlaps_input(const State& s, const at::Tensor& t) {
  uintptr_t lo, hi;
  if (!extent_of(t, lo, hi)) return false;
  for (const auto& r : s.inputs) {
    if (lo < r.second && r.first < hi) return true;
  }
  return false;
}

template <class F>
void for_each_tensor(const c10::IValue& v, F&& f) {
  if (v.isTensor()) {
    f(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList().vec()) f(t);
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) for_each_tensor(e, f);
  } else if (v.isTuple()) {
    for (const c10::IValue& e : v.toTupleRef().elements()) for_each_tensor(e, f);
  }
}

Kind classify(State& s, const at::RecordFunction& fn) {
  std::string name = fn.name();
  auto colon = name.find("::");
  std::string ns = colon == std::string::npos ? "" : name.substr(0, colon);
  std::string base = colon == std::string::npos ? name : name.substr(colon + 2);
  if (!s.builtin_namespaces.count(ns)) return Kind::Custom;
  if (base == "_local_scalar_dense") return Kind::Scalar;
  if (s.copies.count(base)) return Kind::Copy;
  if (s.allowed.count(base)) return Kind::Allowed;
  // A composite operator (one with no kernel of its own) passes: what it decomposes into is judged.
  auto op_name = fn.operator_name();
  auto op = op_name ? c10::Dispatcher::singleton().findOp(*op_name) : std::nullopt;
  if (op && op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) return Kind::Composite;
  return Kind::Refused;
}

// The verdict per operator overload, keyed by its schema's name pointer (stable for the process):
// the hot path takes no lock and builds no string.
Kind kind_of(State& s, const at::RecordFunction& fn) {
  thread_local std::unordered_map<const char*, Kind> cache;
  const char* key = fn.name();
  auto found = cache.find(key);
  if (found != cache.end()) return found->second;
  Kind kind;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    kind = classify(s, fn);
  }
  cache.emplace(key, kind);
  return kind;
}

void note_violation(State& s, const char* rule, const std::string& message) {
  if (s.violation.empty()) {
    s.violation = std::string(rule) + "|" + message;
    std::strncpy(cag_report.rule, rule, sizeof(cag_report.rule) - 1);
    std::strncpy(cag_report.op, message.c_str(), sizeof(cag_report.op) - 1);
  }
  cag_report.violations++;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  if (!recording.load(std::memory_order_acquire)) return nullptr;
  State& s = state();
  ops_seen.fetch_add(1, std::memory_order_relaxed);
  Kind kind = kind_of(s, fn);
  if (kind == Kind::Allowed || kind == Kind::Composite) return nullptr;
  std::lock_guard<std::mutex> lock(s.mu);
  std::string name = fn.name();
  if (kind == Kind::Refused) {
    note_violation(s, "torch-op", name);
    return nullptr;
  }
  if (kind == Kind::Scalar) {
    auto inputs = fn.inputs();
    if (!inputs.empty() && inputs[0].isTensor() && overlaps_input(s, inputs[0].toTensor()) &&
        ++s.input_reads > kInputReads) {
      note_violation(s, "data-movement", name + " (more than " + std::to_string(kInputReads) +
                                             " of the inputs' elements read into Python)");
    }
    return nullptr;
  }
  if (kind == Kind::Custom) {
    cag_report.custom_calls++;
    for (const c10::IValue& v : fn.inputs()) for_each_tensor(v, [&](const at::Tensor& t) {
      if (intptr_t p = storage_of(t)) s.kernel.insert(p);
    });
    return std::make_unique<Ctx>(kind);
  }
  // copy_(self, src): the source is the second argument; clone/_to_copy/lift_fresh_copy: the first
  auto inputs = fn.inputs();
  bool is_copy_into = name == "aten::copy_" || name == "aten::_copy_from" || name == "aten::_copy_from_and_resize";
  size_t src_index = is_copy_into ? 1 : 0;
  if (inputs.size() <= src_index || !inputs[src_index].isTensor()) return nullptr;
  const at::Tensor& src = inputs[src_index].toTensor();
  if (is_copy_into && inputs[0].isTensor()) {
    const at::Tensor& dst = inputs[0].toTensor();
    if (dst.scalar_type() != src.scalar_type() || dst.device() != src.device()) {
      note_violation(s, "torch-op", name + " (a copy that converts dtype or device computes)");
      return nullptr;
    }
  }
  if (overlaps_input(s, src)) {
    note_violation(s, "data-movement", name);
    return nullptr;
  }
  intptr_t p = storage_of(src);
  auto ctx = std::make_unique<Ctx>(kind);
  ctx->from_kernel = p && s.kernel.count(p);
  ctx->src_dtype = src.scalar_type();
  if (is_copy_into && ctx->from_kernel && inputs[0].isTensor()) {
    if (intptr_t d = storage_of(inputs[0].toTensor())) s.kernel.insert(d);
  }
  return ctx;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* raw) {
  auto* ctx = static_cast<Ctx*>(raw);
  if (ctx == nullptr || !recording.load(std::memory_order_acquire)) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (ctx->kind == Kind::Copy) {
    for (const c10::IValue& v : fn.outputs()) for_each_tensor(v, [&](const at::Tensor& t) {
      if (t.scalar_type() != ctx->src_dtype) {
        note_violation(s, "torch-op", std::string(fn.name()) + " (a copy that converts dtype or device computes)");
      }
      if (ctx->from_kernel) {
        if (intptr_t p = storage_of(t)) s.kernel.insert(p);
      }
    });
  } else if (ctx->kind == Kind::Custom) {
    for (const c10::IValue& v : fn.outputs()) for_each_tensor(v, [&](const at::Tensor& t) {
      if (intptr_t p = storage_of(t)) s.kernel.insert(p);
    });
  }
}

std::vector<std::string> split_names(const char* names) {
  std::vector<std::string> out;
  std::string item;
  for (const char* c = names; *c; ++c) {
    if (*c == ',') {
      if (!item.empty()) out.push_back(item);
      item.clear();
    } else {
      item += *c;
    }
  }
  if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

extern "C" {

// Comma-separated op names (without namespace): the allowlist, the copy operators, and the
// namespaces that are PyTorch's own (any other is an operator the solution registered).
int cag_install(const char* allowed, const char* copies, const char* builtin_namespaces) {
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    for (auto& n : split_names(allowed)) s.allowed.insert(n);
    for (auto& n : split_names(copies)) s.copies.insert(n);
    for (auto& n : split_names(builtin_namespaces)) s.builtin_namespaces.insert(n);
  }
  return 1;
}

// `input_ranges`: n pairs (first byte, one past the last) of the inputs' storages.
void cag_begin(const int64_t* input_ranges, int n) {
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.inputs.clear();
    s.kernel.clear();
    s.input_reads = 0;
    s.violation.clear();
    std::memset(cag_report.rule, 0, sizeof(cag_report.rule));
    std::memset(cag_report.op, 0, sizeof(cag_report.op));
    cag_report.begins++;
    for (int i = 0; i < n; ++i) {
      auto lo = static_cast<uintptr_t>(input_ranges[2 * i]), hi = static_cast<uintptr_t>(input_ranges[2 * i + 1]);
      if (lo < hi) s.inputs.emplace_back(lo, hi);
    }
  }
  ops_seen.store(0);
  // The callback exists only around a call (harness code elsewhere pays nothing); every call, timed
  // or not, runs under it alike. Recording is switched on just for the forward itself.
  if (handle == 0) {
    handle = at::addGlobalCallback(at::RecordFunctionCallback(&on_start, &on_end)
                                       .needsInputs(true)
                                       .needsOutputs(true)
                                       .scopes({at::RecordScope::FUNCTION}));
  }
}

intptr_t cag_recording_address() { return reinterpret_cast<intptr_t>(&recording); }

void cag_end() {
  recording.store(false, std::memory_order_release);
  cag_report.ops_seen += ops_seen.load();
  {
    std::lock_guard<std::mutex> lock(state().mu);
    cag_report.ends++;
  }
  if (handle != 0) {
    at::removeCallback(handle);
    handle = 0;
  }
}

void cag_add_kernel_storage(int64_t storage) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (storage) s.kernel.insert(static_cast<intptr_t>(storage));
}

// After a call: its output tensors' storages, each one counted as checked, and as foreign when no
// kernel produced it.
void cag_check_outputs(const int64_t* storages, int n) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  for (int i = 0; i < n; ++i) {
    cag_report.outputs_checked++;
    if (!s.kernel.count(static_cast<intptr_t>(storages[i]))) cag_report.outputs_foreign++;
  }
}

// Where ExtensionProxy counts calls into the compiled modules (a plain store from Python, under the GIL).
intptr_t cag_extension_calls_address() { return reinterpret_cast<intptr_t>(&cag_report.extension_calls); }

int64_t cag_ops_seen() { return ops_seen.load(); }

int cag_record_function_enabled() { return at::isRecordFunctionEnabled() && at::hasGlobalCallbacks() ? 1 : 0; }

}  // extern "C"
