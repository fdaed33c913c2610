#include "aten/engine/OutputRepair.h"

#include <c10/util/Exception.h>
#include <openreg/runtime.h>

namespace openreg::engine {
namespace {

// [marker: engine-view-bits]
// Note [View bits]
// A kernel may flip an output's conjugate or negative bit instead of writing the values
// (linalg_lu_solve with left=False conjugates its result that way). On the CPU the caller's tensor
// carries the flipped bit; here the kernel flipped it on an alias, and the device tensor keeps its
// own bits. So the flip is applied to the memory instead: conjugated or negated in place, the
// device tensor then reads the values the kernel meant.
void keepViewBits(const at::Tensor& alias, const KernelAliasSpec& spec) {
  const bool conj = alias.is_conj() != spec.conj;
  const bool neg = alias.is_neg() != spec.neg;
  if (!conj && !neg) return;
  KernelAliasSpec plain = spec;
  plain.conj = plain.neg = false;
  at::Tensor memory = makeKernelAlias(plain);
  if (conj) memory.conj_physical_();
  if (neg) memory.neg_();
}

}  // namespace

// Note [Regrown outputs]
// Some CPU kernels grow an output on their way and shrink it back: mse_loss.out computes the
// elementwise loss into its result, then reduces into it. A task's aliases are resizable with the
// CPU allocator (makeKernelAlias), so such a kernel moves the alias to host memory instead of
// failing. Afterwards its final values, of the shape the Meta kernel announced, are copied back to
// the device memory.
// Others restride an output in place: max_unpool2d.out gives a channels-last input's output the
// channels-last layout (resize_ with a memory format), where the Meta kernel announced a
// contiguous one. The values then sit in the device memory in the kernel's layout, not the
// device tensor's: they are read out and written back in the device tensor's layout.
// [marker: engine-regrown-outputs]
bool keptLayout(const at::Tensor& alias, const KernelAliasSpec& spec) {
  return alias.storage().data() == spec.data && alias.storage_offset() == 0 &&
         (alias.numel() == 0 || alias.strides() == c10::IntArrayRef(spec.strides));
}

void keepKernelChanges(const c10::OperatorHandle& op, const at::Tensor& alias,
                       const KernelAliasSpec& spec) {
  if (keptLayout(alias, spec)) {
    keepViewBits(alias, spec);
    return;
  }
  TORCH_CHECK(alias.sizes() == c10::IntArrayRef(spec.sizes), OR_DEVICE_NAME ": the CPU kernel of ",
              op.schema().operator_name(), " resized an output to ", alias.sizes(),
              " where its Meta kernel announced ", c10::IntArrayRef(spec.sizes));
  // Restrided in place, the alias reads the memory the copy writes: read it out first.
  const bool inPlace = alias.storage().data() == spec.data;
  makeKernelAlias(spec).copy_(inPlace ? alias.clone() : alias);
}

// A functional kernel's result into its output. The Meta kernel decided the output's shape;
// where the CPU kernel returns an empty tensor instead (native_batch_norm's saved statistics in
// evaluation mode, which it does not compute), the output is zeroed. Any other disagreement is
// an error naming both shapes.
void copyResult(const at::Tensor& result, const at::Tensor& output) {
  if (result.sizes() == output.sizes()) {
    output.copy_(result);
  } else if (result.numel() == 0) {
    output.zero_();
  } else {
    TORCH_CHECK(false, OR_DEVICE_NAME ": the CPU kernel returned a result of shape ",
                result.sizes(), " where the Meta kernel announced ", output.sizes());
  }
}

}  // namespace openreg::engine
