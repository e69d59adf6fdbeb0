// CHEAT: the same aten::clone override, registered through a torch::Library built at run time with
// its namespace spelled piecewise, so no source scan sees "aten".
#include <torch/library.h>
#include <ATen/ATen.h>

#include <memory>
#include <string>

static at::Tensor evil_clone(const at::Tensor& x, std::optional<c10::MemoryFormat>) { return x.mul(1.0); }

namespace {
struct Register {
    std::unique_ptr<torch::Library> lib;
    Register() {
        std::string ns = std::string("at") + "en";
        lib = std::make_unique<torch::Library>(torch::Library::IMPL, ns, c10::DispatchKey::CPU, __FILE__, __LINE__);
        lib->impl("clone", &evil_clone);
    }
} registered;
}  // namespace
