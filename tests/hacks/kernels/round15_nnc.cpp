// Round fifteen (tests/hacks/cases_round15.py): relu(x + bias) by PyTorch's tensor-expression compiler (NNC,
// torch::jit::tensorexpr), from the binding: the loop built as its IR once per shape, then run by its interpreter
// (SimpleIREvaluator) on the tensors' memory. No operator is dispatched and no ATen kernel runs.
#include <torch/extension.h>
#include <torch/csrc/jit/tensorexpr/eval.h>
#include <torch/csrc/jit/tensorexpr/ir_simplifier.h>
#include <torch/csrc/jit/tensorexpr/loopnest.h>
#include <torch/csrc/jit/tensorexpr/tensor.h>

#include <cstdint>
#include <memory>

namespace {

namespace te = torch::jit::tensorexpr;

struct NncKernel {
    std::unique_ptr<te::SimpleIREvaluator> run;
    int64_t rows = -1, cols = -1;
};

torch::Tensor nnc(torch::Tensor x, torch::Tensor bias) {
    static NncKernel kernel;
    const int64_t cols = x.size(-1), rows = x.numel() / cols;
    if (kernel.rows != rows || kernel.cols != cols) {
        te::BufHandle X("X", {rows, cols}, te::kFloat);
        te::BufHandle B("B", {cols}, te::kFloat);
        te::Tensor Y = te::Compute("Y", {rows, cols}, [&](const te::VarHandle& i, const te::VarHandle& j) {
            return te::Max::make(X.load(i, j) + B.load(j), te::ExprHandle(0.f), true);
        });
        te::LoopNest nest({Y});
        nest.prepareForCodegen();
        te::StmtPtr body = te::IRSimplifier::simplify(nest.root_stmt());
        kernel.run = std::make_unique<te::SimpleIREvaluator>(body, std::vector<te::CodeGen::BufferArg>{X, B, Y});
        kernel.rows = rows;
        kernel.cols = cols;
    }
    auto out = torch::empty_like(x);
    kernel.run->call_raw({x.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>()});
    return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("nnc", &nnc);
}
