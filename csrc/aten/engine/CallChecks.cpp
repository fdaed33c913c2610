#include "aten/engine/CallChecks.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/Dispatch.h>
#include <ATen/EmptyTensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/ScalarOps.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/BucketizationUtils.h>
#include <ATen/native/RangeUtils.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/index.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/zeros.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <c10/util/FunctionRef.h>
#include <openreg/runtime.h>
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "aten/engine/Arguments.h"
#include "aten/engine/AsyncTask.h"
#include "aten/engine/HeldWarnings.h"
#include "aten/engine/Ledger.h"
#include "aten/engine/SyncPath.h"

namespace openreg::engine {
namespace {

// index_fill(_).int_Scalar (self, dim, index, value): the CPU refuses a complex value for a
// non-complex self; torch._meta_registrations' index_fill accepts it.
void indexFillScalar(const c10::OperatorHandle&, c10::ArrayRef<c10::IValue> args, c10::Device) {
  const at::Tensor& self = args[0].toTensor();
  TORCH_CHECK(!(args[3].isComplexDouble() && !self.is_complex()),
              "index_fill_(): Converting complex Scalar to non-complex type");
}

// complex(real, imag) and polar(abs, angle): the CPU requires one dtype for both
// (complex_check_dtype).
void complexSameDtype(const c10::OperatorHandle&, c10::ArrayRef<c10::IValue> args, c10::Device) {
  const at::Tensor& real = args[0].toTensor();
  const at::Tensor& imag = args[1].toTensor();
  TORCH_CHECK(real.scalar_type() == imag.scalar_type(), "Expected object of scalar type ",
              real.scalar_type(), " but got scalar type ", imag.scalar_type(),
              " for second argument");
}

// add and sub (self, other, alpha): the CPU's alpha_check on the promoted dtype, and sub's refusal
// of two bool tensors; PyTorch's Meta kernel accepts a float alpha for bool tensors.
void alphaFits(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args, c10::Device) {
  const at::Tensor& self = args[0].toTensor();
  const c10::ScalarType dtype = args[1].isTensor() ? at::result_type(self, args[1].toTensor())
                                                   : at::result_type(self, args[1].toScalar());
  at::native::alpha_check(dtype, args[2].toScalar());
  if (op.schema().name() == "aten::sub" || op.schema().name() == "aten::sub_") {
    if (args[1].isTensor()) at::native::sub_check(self, args[1].toTensor());
  }
}

// randperm(n, ..., out): n must fit the out's dtype exactly (check_supported_max_int_with_
// precision, asked of a CPU stand-in of the out so that it queues nothing on the device).
void randpermFits(const c10::OperatorHandle&, c10::ArrayRef<c10::IValue> args, c10::Device) {
  const at::Tensor& out = args.back().toTensor();
  const int64_t n = args[0].toInt();
  TORCH_CHECK(n >= 0, "n must be non-negative, got", n);
  at::native::check_supported_max_int_with_precision(
      n, at::empty({0}, out.options().device(c10::kCPU)));
}

// A CPU stand-in of at most one element per dimension, zero (an index stand-in is in bounds).
at::Tensor smallStandIn(const at::Tensor& t) {
  c10::SmallVector<int64_t, 6> sizes(t.sizes().begin(), t.sizes().end());
  for (int64_t& size : sizes) size = std::min<int64_t>(size, 1);
  return at::zeros(sizes, t.options().device(c10::kCPU));
}

// A CPU stand-in of the same sizes and strides (so the same overlaps), zero.
at::Tensor sameLayoutStandIn(const at::Tensor& t) {
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kCPU)).zero_();
}

struct Mapping {
  void* start;
  size_t bytes;
};

// A CPU storage of `bytes` that costs nothing until written: a private anonymous mapping reads as
// zeros (the kernel's zero page), so a stand-in of a gigabyte tensor is made and dropped in
// microseconds.
c10::Storage zeroPages(size_t bytes) {
  const size_t length = std::max<size_t>(bytes, 1);
  void* pages = mmap(nullptr, length, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  TORCH_CHECK(pages != MAP_FAILED, OR_DEVICE_NAME ": no host address space for a stand-in of ",
              bytes, " bytes");
  c10::DataPtr data(
      pages, new Mapping{pages, length},
      [](void* context) {
        auto* mapping = static_cast<Mapping*>(context);
        munmap(mapping->start, mapping->bytes);
        delete mapping;
      },
      c10::Device(c10::kCPU));
  // Resizable, as a CPU tensor's storage is: a kernel may resize its out= stand-in.
  return c10::Storage(c10::Storage::use_byte_size_t(), bytes, std::move(data),
                      c10::GetCPUAllocator(), /*resizable=*/true);
}

// A zero CPU stand-in of the same sizes and strides, over zero pages when it is not small.
at::Tensor zeroPagesStandIn(const at::Tensor& t) {
  const size_t bytes =
      at::detail::computeStorageNbytes(t.sizes(), t.strides(), t.dtype().itemsize());
  constexpr size_t kSmall = size_t{64} << 10;
  if (bytes < kSmall) return sameLayoutStandIn(t);
  return at::empty({0}, t.options().device(c10::kCPU))
      .set_(zeroPages(bytes), 0, t.sizes(), t.strides());
}

// The CPU kernel on CPU stand-ins, with a generator of its own, so that no user generator moves:
// every check the kernel makes on dtypes, dimensions and Scalars is the CPU's, in its words, at
// the call.
void runOnStandIns(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                   c10::Device device, bool keepWarnings,
                   c10::function_ref<at::Tensor(const at::Tensor&)> standIn = &smallStandIn) {
  torch::jit::Stack s = standIns(args, c10::kCPU, standIn);
  const auto& arguments = op.schema().arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (arguments[i].name() == "generator") s[i] = at::detail::createCPUGenerator();
  }
  std::optional<DroppedWarnings> quiet;  // the task gives the call's own
  if (!keepWarnings) quiet.emplace();
  at::AutoDispatchBelowADInplaceOrView guard;
  countCheckKernel();
  runCpuKernelNamingDevice(op, &s, device);
}

// Passes every warning on, and notes that there was one.
class NoteWarnings : public c10::WarningHandler {
 public:
  NoteWarnings() : next_(c10::WarningUtils::get_warning_handler()) {}
  void process(const c10::Warning& warning) override {
    warned = true;
    next_->process(warning);
  }
  bool warned = false;

 private:
  c10::WarningHandler* next_;
};

// The in-place random operators: the CPU kernel's bounds checks and warnings, given at the call.
void randomOnStandIn(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                     c10::Device device) {
  runOnStandIns(op, args, device, /*keepWarnings=*/true);
}

// A call the CPU kernel may refuse for its arguments' metadata where PyTorch's Meta kernel (most
// are Python decompositions) accepts it: the predicate says when to ask the CPU kernel on
// stand-ins, so that the common call pays a comparison or two and no kernel.
using MightRefuse = bool (*)(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args);

template <MightRefuse kMightRefuse, at::Tensor (*kStandIn)(const at::Tensor&) = &smallStandIn>
void askCpuIf(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args, c10::Device device) {
  if (kMightRefuse(op.schema(), args))
    runOnStandIns(op, args, device, /*keepWarnings=*/false, kStandIn);
}

c10::ScalarType outDtype(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args,
                         c10::ScalarType otherwise) {
  const auto& arguments = schema.arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (arguments[i].is_out() && args[i].isTensor() && args[i].toTensor().defined())
      return args[i].toTensor().scalar_type();
  }
  return otherwise;
}

// Operators whose CPU kernel wants an out= of one exact dtype (the input's, int64) where the Meta
// kernel accepts any it can cast to: asked when the out's dtype is not the first input's.
bool outDtypeDiffers(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args) {
  if (args.empty() || !args[0].isTensor()) return false;
  const c10::ScalarType dtype = args[0].toTensor().scalar_type();
  const auto& arguments = schema.arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (arguments[i].is_out() && args[i].isTensor() && args[i].toTensor().scalar_type() != dtype)
      return true;
  }
  return false;
}

// masked_scatter_ refuses a mask of another dtype than bool (uint8 masks are no longer accepted).
bool maskNotBool(const c10::FunctionSchema&, c10::ArrayRef<c10::IValue> args) {
  return args[1].toTensor().scalar_type() != at::kBool;
}

// complex(real, imag, out=): the out must be the complex dtype of the parts.
bool complexOutDiffers(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args) {
  if (!c10::isFloatingType(args[0].toTensor().scalar_type())) return false;  // complexSameDtype's
  return outDtype(schema, args, at::kComplexFloat) !=
         c10::toComplexType(args[0].toTensor().scalar_type());
}

// all and any write bool (or uint8 for uint8) only.
bool outNotBool(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args) {
  return outDtype(schema, args, at::kBool) != at::kBool;
}

// In-place leaky_relu and elu with a negative slope cannot be differentiated: their backward
// refuses is_result with a negative slope (negval, alpha), in its structured Meta function, which
// PyTorch's Python Meta kernel replaces.
bool negativeSlopeOnResult(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args) {
  const auto isResult = schema.argumentIndexWithName(
      schema.name() == "aten::leaky_relu_backward" ? "self_is_result" : "is_result");
  const auto slope = schema.argumentIndexWithName(
      schema.name() == "aten::leaky_relu_backward" ? "negative_slope" : "alpha");
  return isResult && slope && args[*isResult].toBool() && args[*slope].toScalar().toDouble() < 0;
}

// gelu's `approximate` names its formula; the CPU kernel refuses a name other than "none" and
// "tanh" in its body (get_gelutype_enum), after its structured Meta function, which accepts any.
bool geluApproximateUnknown(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args) {
  const auto index = schema.argumentIndexWithName("approximate");
  if (!index || !args[*index].isString()) return false;
  const std::string_view approximate = args[*index].toStringView();
  return approximate != "none" && approximate != "tanh";
}

// The interpolating upsample kernels take floating-point inputs only on the CPU (uint8 for some
// modes, channel counts and layouts): asked for any other input, on stand-ins of the same layout,
// since the answer depends on the sizes.
bool selfNotFloating(const c10::FunctionSchema&, c10::ArrayRef<c10::IValue> args) {
  return !args.empty() && args[0].isTensor() && !args[0].toTensor().is_floating_point();
}

// floor, ceil, trunc and round refuse complex inputs, on the CPU only.
bool selfComplex(const c10::FunctionSchema&, c10::ArrayRef<c10::IValue> args) {
  return !args.empty() && args[0].isTensor() && args[0].toTensor().is_complex();
}

// TensorIterator refuses a reduction over a tensor of more than 64 dimensions ("only tensors with
// up to 64 dims are supported"); no Meta kernel does.
bool over64Dims(const c10::FunctionSchema&, c10::ArrayRef<c10::IValue> args) {
  bool over = false;
  for (const c10::IValue& arg : args)
    forEachTensor(arg, [&](const at::Tensor& t) { over = over || t.dim() > 64; });
  return over;
}

// searchsorted and bucketize: ATen's own searchsorted_pre_check (side, devices, the sorter's size
// and dtype, dimensions, the out's dtype), on CPU stand-ins of the true sizes that hold no memory
// (one zero, expanded): the sorter's values are data, and a zero is in range.
void searchsortedFits(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args, c10::Device) {
  const auto& schema = op.schema();
  auto standIn = [](const c10::IValue& v) -> at::Tensor {
    if (!v.isTensor()) return v.isScalar() ? at::scalar_to_tensor(v.toScalar()) : at::Tensor();
    const at::Tensor& t = v.toTensor();
    return at::zeros({}, t.options().device(c10::kCPU)).expand(t.sizes());
  };
  const bool bucketize = schema.name() == "aten::bucketize";
  const at::Tensor boundaries = standIn(args[bucketize ? 1 : 0]);
  const at::Tensor input = standIn(args[bucketize ? 0 : 1]);
  const bool outInt32 = args[*schema.argumentIndexWithName("out_int32")].toBool();
  const bool right = args[*schema.argumentIndexWithName("right")].toBool();
  std::optional<std::string_view> side;
  at::Tensor sorter;
  if (!bucketize) {
    const c10::IValue& sideArg = args[*schema.argumentIndexWithName("side")];
    if (sideArg.isString()) side = sideArg.toStringView();
    sorter = standIn(args[*schema.argumentIndexWithName("sorter")]);
  }
  const auto out = schema.argumentIndexWithName("out");
  const at::Tensor output =
      out ? standIn(args[*out])
          : at::empty({0}, at::TensorOptions(outInt32 ? at::kInt : at::kLong));
  if (bucketize) {
    TORCH_CHECK(boundaries.dim() == 1, "boundaries tensor must be 1 dimension, but got dim(",
                boundaries.dim(), ")");
  }
  at::native::searchsorted_pre_check(boundaries, input, output, outInt32, right, side, sorter);
}

// A written argument that overlaps itself (an expanded tensor): most CPU kernels refuse it
// (TensorIterator's assert_no_internal_overlap), some write it (fill_, zero_), some warn; Meta
// kernels cannot tell. Asked of the CPU kernel on stand-ins of the same layout, so the same
// overlap: a rare call, which then pays one CPU kernel on zeros.
void writtenOverlapOnStandIns(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                              c10::Device device) {
  const auto& arguments = op.schema().arguments();
  bool overlaps = false;
  for (size_t i = 0; i < arguments.size() && !overlaps; ++i) {
    const auto* alias = arguments[i].alias_info();
    if (alias != nullptr && alias->isWrite() && args[i].isTensor() && args[i].toTensor().defined())
      overlaps = at::has_internal_overlap(args[i].toTensor()) == at::MemOverlap::Yes;
  }
  if (overlaps) runOnStandIns(op, args, device, /*keepWarnings=*/false, &sameLayoutStandIn);
}

// An out= argument that shares memory with an input: some CPU kernels refuse any overlap
// (masked_select, take, cat, kthvalue: assert_no_overlap), others only a partial one. The engine's
// kernel-window aliases are one storage each, so the CPU kernel cannot see it; asked instead on
// stand-ins that share memory as the device tensors do (one zero-pages buffer per device storage,
// each stand-in at its tensor's offset): a rare call, which then pays one CPU kernel on zeros.
void outOverlapOnStandIns(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                          c10::Device device) {
  const auto& arguments = op.schema().arguments();
  bool shares = false;
  for (size_t i = 0; i < arguments.size() && !shares; ++i) {
    if (!arguments[i].is_out() || !args[i].isTensor() || !args[i].toTensor().defined()) continue;
    const at::Tensor& out = args[i].toTensor();
    for (size_t j = 0; j < args.size() && !shares; ++j) {
      if (j == i) continue;
      forEachTensor(args[j], [&](const at::Tensor& input) {
        shares = shares || (input.defined() && input.numel() > 0 && out.numel() > 0 &&
                            at::get_overlap_status(out, input) != at::MemOverlapStatus::No);
      });
    }
  }
  if (!shares) return;
  std::unordered_map<const c10::StorageImpl*, c10::Storage> buffers;
  runOnStandIns(op, args, device, /*keepWarnings=*/false, [&](const at::Tensor& t) {
    auto [buffer, made] = buffers.try_emplace(t.storage().unsafeGetStorageImpl());
    if (made) buffer->second = zeroPages(t.storage().nbytes());
    return at::empty({0}, t.options().device(c10::kCPU))
        .set_(buffer->second, t.storage_offset(), t.sizes(), t.strides());
  });
}

// put_ without accumulate has no deterministic CPU kernel: in deterministic mode the CPU refuses
// it before it writes (Context::alertNotDeterministic). Refused in the task, the failure would
// also poison self, which the CPU leaves as it was. In warn-only mode the task gives the warning.
void putDeterministic(const c10::OperatorHandle&, c10::ArrayRef<c10::IValue> args, c10::Device) {
  const CallState state = CallState::capture();  // the host's mode, not a running task's
  if (state.deterministic && !state.deterministicWarnOnly && !args[3].toBool()) {
    CallState::waitForHostMode();  // ATen's alert reads the process-wide mode
    at::globalContext().alertNotDeterministic("put_");
  }
}

// index_put_ (self, indices, values, accumulate): the CPU's checks of dtypes and shapes, which
// need no data unless an index is a mask (its count of true elements is data).
void indexPutFits(const c10::OperatorHandle&, c10::ArrayRef<c10::IValue> args, c10::Device) {
  const at::Tensor& self = args[0].toTensor();
  const at::Tensor& values = args[2].toTensor();
  TORCH_CHECK(self.scalar_type() == values.scalar_type(),
              "Index put requires the source and destination dtypes match, got ",
              self.scalar_type(), " for the destination and ", values.scalar_type(),
              " for the source.");
  c10::List<std::optional<at::Tensor>> indices;
  bool any = false;
  for (const c10::IValue& index : args[1].toListRef()) {
    if (!index.isTensor() || !index.toTensor().defined()) {  // a sliced dimension
      indices.push_back(std::nullopt);
      continue;
    }
    const at::Tensor& t = index.toTensor();
    if (t.scalar_type() == at::kBool || t.scalar_type() == at::kByte) return;  // a mask: data
    indices.push_back(at::empty(t.sizes(), t.options().device(c10::kMeta)));
    any = true;
  }
  // Indices that do not broadcast together: the CPU's IndexError (the Meta kernel of index raises
  // a RuntimeError of its own words).
  c10::DimVector broadcast;
  std::string shapes;
  bool fits = true;
  for (const std::optional<at::Tensor>& index : indices) {
    if (!index) continue;
    const c10::IntArrayRef sizes = index->sizes();
    shapes += (shapes.empty() ? "" : ", ") + c10::str(sizes);
    if (!fits) continue;
    try {
      broadcast = at::infer_size_dimvector(broadcast, sizes);
    } catch (const c10::Error&) {
      fits = false;
    }
  }
  TORCH_CHECK_INDEX(fits,
                    "shape mismatch: indexing tensors could not be broadcast together with "
                    "shapes ",
                    shapes);
  // The indexing result's shape, from the Meta kernel of index.
  const at::Tensor meta = at::empty(self.sizes(), self.options().device(c10::kMeta));
  const at::Tensor result = any ? at::index(meta, indices) : meta;
  TORCH_CHECK(at::is_expandable_to(values.sizes(), result.sizes()),
              "shape mismatch: value tensor of shape ", values.sizes(),
              " cannot be broadcast to indexing result of shape ", result.sizes());
}

// masked_scatter_ expands its mask to self, in place (expand_inplace): a mask that self would
// have to grow to is refused, in expand's words (a view: no kernel runs).
void maskExpandsToSelf(const c10::OperatorHandle&, c10::ArrayRef<c10::IValue> args, c10::Device) {
  (void)args[1].toTensor().expand(args[0].toTensor().sizes());
}

// arange's out= of another count than the sequence's: the CPU warns in its own words and resizes
// it to 1-d (Note [Sequence factories keep their out's shape] in OpTraits.cpp).
void arangeOutCount(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args, c10::Device) {
  const bool withStart = op.schema().overload_name() != "out";
  const c10::Scalar start = withStart ? args[0].toScalar() : c10::Scalar(0);
  const c10::Scalar end = withStart ? args[1].toScalar() : args[0].toScalar();
  const c10::Scalar step = withStart ? args[2].toScalar() : c10::Scalar(1);
  const at::Tensor& out = args.back().toTensor();
  int64_t size = 0;
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "arange_out", [&] {
    size = at::native::compute_arange_size<scalar_t>(start, end, step);
  });
  if (out.numel() == size) return;
  if (out.numel() > 0) {
    TORCH_WARN("The number of elements in the out tensor of shape ", out.sizes(), " is ",
               out.numel(), " which does not match the computed number of elements ", size,
               ". Note that this may occur as a result of rounding error. The out tensor will be "
               "resized to a tensor of shape (",
               size, ",).");
  }
  out.resize_({size});
}

// The CPU kernel's assert_no_internal_overlap on every argument it writes: an expanded tensor
// (stride 0) or another self-overlapping view is refused, in the CPU's words.
void writtenWithoutOverlap(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                           c10::Device) {
  const auto& arguments = op.schema().arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    const auto* alias = arguments[i].alias_info();
    if (alias != nullptr && alias->isWrite() && args[i].isTensor())
      at::assert_no_internal_overlap(args[i].toTensor());
  }
}

// `check(written, input)` for each argument the operator writes and every other tensor argument.
template <void (*kCheck)(const at::TensorBase&, const at::TensorBase&)>
void eachWrittenAgainstInputs(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  const auto& arguments = op.schema().arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    const auto* alias = arguments[i].alias_info();
    if (alias == nullptr || !alias->isWrite() || !args[i].isTensor()) continue;
    const at::Tensor& written = args[i].toTensor();
    for (size_t j = 0; j < args.size(); ++j) {
      if (j == i) continue;
      forEachTensor(args[j], [&](const at::Tensor& input) {
        if (input.defined()) kCheck(written, input);
      });
    }
  }
}

// The CPU kernel's assert_no_overlap between each argument it writes and every other tensor
// argument: y.index_add_(0, index, y[:3]) would read what it writes.
void writtenApartFromInputs(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                            c10::Device) {
  eachWrittenAgainstInputs<&at::assert_no_overlap>(op, args);
}

// TensorIterator's assert_no_partial_overlap between each written argument and every input, for
// every operator that writes: x[:-1].add_(x[1:]) reads what it writes. The CPU kernel would raise
// it itself, but on the engine's aliases, one storage each, it cannot see the overlap, and the
// Meta kernel cannot either (meta tensors have no addresses).
void writtenApartFromPartialInputs(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                                   c10::Device) {
  eachWrittenAgainstInputs<&at::assert_no_partial_overlap>(op, args);
}

// Operators whose CPU kernel refuses a written argument that overlaps an input, and whose Meta
// kernel does not.
bool checksInputOverlap(std::string_view op) {
  return op == "aten::masked_scatter_" || op == "aten::put_" || op == "aten::scatter_" ||
         op == "aten::scatter_add_" || op == "aten::scatter_reduce_" || op == "aten::index_add_" ||
         op == "aten::index_copy_" || op == "aten::index_fill_" || op == "aten::index_put_" ||
         op == "aten::_index_put_impl_" || op == "aten::masked_fill_";
}

// Operators whose CPU kernel refuses a self-overlapping output and whose Meta kernel does not.
bool checksOverlap(std::string_view op, std::string_view overload) {
  const bool out = overload.find("out") != std::string_view::npos;
  return op == "aten::masked_scatter_" || op == "aten::put_" || op == "aten::scatter_" ||
         op == "aten::scatter_add_" || op == "aten::scatter_reduce_" || op == "aten::bernoulli_" ||
         op == "aten::index_add_" || op == "aten::index_copy_" ||
         (out && (op == "aten::cat" || op == "aten::linspace" || op == "aten::logspace"));
}

// Operators the CPU lets write into an expanded self, with a deprecation warning given by the
// kernel, which on openreg runs in the task.
template <const char* kMessage>
void warnIfExpanded(const c10::OperatorHandle&, c10::ArrayRef<c10::IValue> args, c10::Device) {
  if (at::has_internal_overlap(args[0].toTensor()) == at::MemOverlap::Yes) TORCH_WARN(kMessage);
}

constexpr char kIndexPut[] =
    "Use of index_put_ on expanded tensors is deprecated. Please clone() the tensor before "
    "performing this operation. This also applies to advanced indexing e.g. tensor[indices] = "
    "tensor";
constexpr char kMaskedFill[] =
    "Use of masked_fill_ on expanded tensors is deprecated. Please clone() the tensor before "
    "performing this operation. This also applies to advanced indexing e.g. tensor[mask] = scalar";
constexpr char kIndexFill[] =
    "Use of index_fill_ on expanded tensors is deprecated. Please clone() the tensor before "
    "performing this operation. This also applies to advanced indexing e.g. tensor[mask] = scalar";

constexpr std::array<std::string_view, 8> kRandomInPlace = {
    "aten::random_",    "aten::uniform_",    "aten::normal_", "aten::exponential_",
    "aten::geometric_", "aten::log_normal_", "aten::cauchy_", "aten::bernoulli_"};

// Found by asking the CPU kernel of every operator with an out= overload for an out of another
// dtype (docs/conformance.md). Left out: operators whose stand-ins would fail another check first
// (linalg_cross wants a dimension of 3, kthvalue an index within its dimension).
// aminmax was found by OpInfo's error inputs (tests/test_error_inputs.py).
constexpr std::array<std::string_view, 14> kExactOutDtype = {
    "aten::neg",   "aten::round", "aten::bitwise_not",  "aten::conj_physical", "aten::hardshrink",
    "aten::clamp", "aten::amax",  "aten::amin",         "aten::sort",          "aten::median",
    "aten::mode",  "aten::histc", "aten::index_select", "aten::aminmax"};

}  // namespace

// [marker: engine-meta-error-at-call]
void raiseCpuErrorAtCall(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                         c10::Device device) {
  runOnStandIns(op, args, device, /*keepWarnings=*/false, &zeroPagesStandIn);
}

void runCallChecks(const CallChecks& checks, ShapeCache& known, const Signature* signature,
                   const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                   c10::Device device) {
  if (checks.checks.empty()) return;
  NoteWarnings noted;
  {
    c10::WarningUtils::WarningHandlerGuard guard(&noted);
    for (CallCheck check : checks.checks) check(op, args, device);
  }
  if (signature != nullptr && !noted.warned) known.rememberChecked(*signature);
}

CallChecks callChecksFor(const c10::FunctionSchema& schema) {
  const std::string_view op = schema.name();
  const std::string_view overload = schema.overload_name();
  CallChecks checks;
  const bool hasOut = std::any_of(schema.arguments().begin(), schema.arguments().end(),
                                  [](const c10::Argument& a) { return a.is_out(); });
  auto add = [&](CallCheck check, bool warns) {
    checks.checks.push_back(check);
    checks.warn = checks.warn || warns;
  };
  if (op == "aten::index_fill_") add(&warnIfExpanded<kIndexFill>, true);
  if (op == "aten::masked_fill_") add(&warnIfExpanded<kMaskedFill>, true);
  if (op == "aten::index_put_" || op == "aten::_index_put_impl_")
    add(&warnIfExpanded<kIndexPut>, true);
  if ((op == "aten::index_fill_" || op == "aten::index_fill") && overload == "int_Scalar")
    add(&indexFillScalar, false);
  if ((op == "aten::add" || op == "aten::add_" || op == "aten::sub" || op == "aten::sub_") &&
      schema.arguments().size() >= 3 && schema.arguments()[2].name() == "alpha")
    add(&alphaFits, false);
  if (op == "aten::complex" || op == "aten::polar") add(&complexSameDtype, false);
  if (op == "aten::index_put_" || op == "aten::index_put" || op == "aten::_index_put_impl_")
    add(&indexPutFits, false);
  if (op == "aten::masked_scatter_") {
    add(&maskExpandsToSelf, false);
    add(&askCpuIf<&maskNotBool>, false);
  }
  if (op == "aten::complex" && hasOut) add(&askCpuIf<&complexOutDiffers>, false);
  if (op == "aten::put_") add(&putDeterministic, false);
  if (op == "aten::arange" && overload.find("out") != std::string_view::npos)
    add(&arangeOutCount, true);
  if (hasOut && std::find(kExactOutDtype.begin(), kExactOutDtype.end(), op) != kExactOutDtype.end())
    add(&askCpuIf<&outDtypeDiffers>, false);
  if (hasOut && (op == "aten::all" || op == "aten::any")) add(&askCpuIf<&outNotBool>, false);
  if (op == "aten::floor" || op == "aten::ceil" || op == "aten::trunc" || op == "aten::round")
    add(&askCpuIf<&selfComplex>, false);
  if (op == "aten::bucketize" || op == "aten::searchsorted") add(&searchsortedFits, false);
  if (!schema.arguments().empty()) add(&askCpuIf<&over64Dims>, false);
  if (op == "aten::randperm" && overload.find("out") != std::string_view::npos &&
      schema.arguments().front().type()->kind() == c10::TypeKind::IntType)
    add(&randpermFits, false);
  const bool writes =
      std::any_of(schema.arguments().begin(), schema.arguments().end(), [](const c10::Argument& a) {
        return a.alias_info() != nullptr && a.alias_info()->isWrite();
      });
  if (checksOverlap(op, overload)) {
    add(&writtenWithoutOverlap, false);
  } else if (writes) {
    add(&writtenOverlapOnStandIns, false);
  }
  if (hasOut) add(&outOverlapOnStandIns, false);
  if (checksInputOverlap(op)) {
    add(&writtenApartFromInputs, false);
  } else if (writes) {
    add(&writtenApartFromPartialInputs, false);
  }
  if (op.find("upsample_") != std::string_view::npos)
    add(&askCpuIf<&selfNotFloating, &sameLayoutStandIn>, false);
  if (op == "aten::gelu" || op == "aten::gelu_" || op == "aten::gelu_backward")
    add(&askCpuIf<&geluApproximateUnknown>, false);
  if (op == "aten::leaky_relu_backward" || op == "aten::elu_backward")
    add(&askCpuIf<&negativeSlopeOnResult>, false);
  // bernoulli_.Tensor's probabilities are data: only its float overload runs on a stand-in.
  if (std::find(kRandomInPlace.begin(), kRandomInPlace.end(), op) != kRandomInPlace.end() &&
      !(op == "aten::bernoulli_" && overload != "float")) {
    add(&randomOnStandIn, true);
    checks.readValues = true;
  }
  return checks;
}

}  // namespace openreg::engine
