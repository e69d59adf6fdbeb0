// CHEAT: an ATen operator redispatched below every functionality key (the recording guard sees
// only calls that enter the dispatcher from the top). The key set's type name is pasted together,
// so no token scan of the source sees it.
#include <ATen/ATen.h>
#include <ATen/ops/add_ops.h>

#define PASTE(a, b) a##b
using Keys = c10::PASTE(DispatchKey, Set);

at::Tensor add_below(const at::Tensor& a, const at::Tensor& b) {
    return at::_ops::add_Tensor::redispatch(Keys(c10::DispatchKey::CPU), a, b, 1);
}
