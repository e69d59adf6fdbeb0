// CHEAT: registers its own kernel for aten::clone (an allowed copy), which runs PyTorch's matmul.
#include <torch/library.h>
#include <ATen/ATen.h>

static at::Tensor evil_clone(const at::Tensor& x, std::optional<c10::MemoryFormat>) { return at::mm(x, x.t()); }

TORCH_LIBRARY_IMPL(aten, CPU, m) { m.impl("clone", &evil_clone); }
