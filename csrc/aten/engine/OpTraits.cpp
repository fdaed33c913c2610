#include "aten/engine/OpTraits.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "aten/engine/CppMeta.h"

namespace openreg::engine {
namespace {

// Whether `handle` is the .out overload of `schema`: the same arguments, then write-aliased
// tensors, one per return.
bool isOutVariantOf(const c10::OperatorHandle& handle, const c10::FunctionSchema& schema) {
  const auto& out = handle.schema();
  const size_t nArgs = schema.arguments().size();
  if (out.arguments().size() != nArgs + schema.returns().size()) return false;
  bool matches = true;
  for (size_t i = 0; i < nArgs && matches; ++i) {
    matches = out.arguments()[i].name() == schema.arguments()[i].name() &&
              *out.arguments()[i].type() == *schema.arguments()[i].type();
  }
  for (size_t i = nArgs; i < out.arguments().size() && matches; ++i) {
    const auto* alias = out.arguments()[i].alias_info();
    matches = alias != nullptr && alias->isWrite() &&
              out.arguments()[i].type()->kind() == c10::TypeKind::TensorType;
  }
  return matches && handle.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU);
}

// [marker: engine-out-variant]
// The .out overload of a functional operator, which the engine's task runs so the CPU kernel
// writes straight into device memory. Usually named after the functional overload (add.Tensor:
// add.out; sum.dim_IntList: sum.IntList_out, found by the scan), else none: the functional kernel
// runs and its results are copied.
std::optional<c10::OperatorHandle> findOutVariant(const c10::FunctionSchema& schema) {
  auto& dispatcher = c10::Dispatcher::singleton();
  const std::string& overload = schema.overload_name();
  for (const std::string& name :
       {overload.empty() ? std::string("out") : overload + "_out", std::string("out")}) {
    auto handle = dispatcher.findSchema({schema.name(), name});
    if (handle && isOutVariantOf(*handle, schema)) return handle;
  }
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    if (name.name != schema.name() || name.overload_name.find("out") == std::string::npos) continue;
    auto handle = dispatcher.findSchema(name);
    if (handle && isOutVariantOf(*handle, schema)) return handle;
  }
  return std::nullopt;
}

// [marker: engine-meta-disagrees]
// Operators whose Meta kernel announces other output shapes than their CPU kernel returns, though
// both follow from the arguments' metadata alone: the CPU's embedding_bag leaves offset2bag empty
// in sum mode and sizes bag_size and max_indices by bag in modes where the Meta kernel announces
// empty ones (and the backward reads them); oneDNN's LSTM layer returns a workspace whose size
// only oneDNN knows, where the Meta kernel announces an empty one. Others agree on sizes and not
// on strides, which code that views the results or compiles them relies on (Inductor asserts the
// strides of extern kernels' results; the compile sweep found these): linalg_eig's eigenvectors
// are column-major on the CPU (LAPACK's layout) and row-major on Meta, and _fft_r2c over several
// dimensions is contiguous on the CPU and permuted on Meta. And multilabel_margin_loss_forward's
// and multi_margin_loss's output is 1-d on Meta for a 0-d input with reduction none, 0-d on the
// CPU (test_torch.py's test_scalar_check). The first call per signature runs on the synchronizing
// path and its CPU results give the shapes and strides for the later ones (Note [Shapes from the
// CPU kernel] in SyncPath.cpp).
bool metaShapesDisagree(const c10::OperatorName& name) {
  return name.overload_name.empty() &&
         (name.name == "aten::_embedding_bag" || name.name == "aten::_embedding_bag_forward_only" ||
          name.name == "aten::mkldnn_rnn_layer" || name.name == "aten::linalg_eig" ||
          name.name == "aten::_fft_r2c" || name.name == "aten::multilabel_margin_loss_forward" ||
          name.name == "aten::multi_margin_loss");
}

// [marker: engine-sequence-out]
// Note [Sequence factories keep their out's shape]
// The CPU's linspace, logspace, arange and range .out kernels resize their out= argument only when
// its number of elements differs from the sequence's; an out of the right count keeps its shape
// (torch.linspace(0, 3, 4, out=x.narrow(1, 1, 2)) fills the 2x2 view). Their Python Meta kernels
// resize it to the sequence's 1-d shape whenever the shapes differ, and followed, the engine
// resized the view and wrote over elements outside it. So for these operators, an out with the
// right count keeps its shape and strides.
bool sequenceOut(const c10::OperatorName& name) {
  return name.overload_name.find("out") != std::string::npos &&
         (name.name == "aten::linspace" || name.name == "aten::logspace" ||
          name.name == "aten::arange" || name.name == "aten::range");
}

// [marker: engine-overwrites-self]
// The in-place random operators write every element of self and read none: declared as reads
// (Note [Poisoned memory] in runtime/src/Poison.h), a torch.rand whose block last held a failed
// task's output took that failure on, long after it was reported.
bool overwritesSelf(const c10::OperatorName& name) {
  static constexpr std::string_view kOps[] = {
      "aten::random_",    "aten::uniform_",    "aten::normal_", "aten::exponential_",
      "aten::geometric_", "aten::log_normal_", "aten::cauchy_", "aten::bernoulli_"};
  return std::find(std::begin(kOps), std::end(kOps), name.name) != std::end(kOps);
}

// [marker: engine-out-needs-contiguous]
// Note [Out kernels that need a contiguous input]
// The CPU's native_batch_norm.out (batch_norm_cpu_out, also behind the _native_batch_norm_legit
// and _batch_norm_with_update families) is right only for an input contiguous in some memory
// format: for x = repeat_interleave(t, 2, dim=-1)[..., ::2] (strides (20, 2)) it writes wrong
// values (max error 1.07) and garbage statistics, whatever the out tensors' layout, while the
// functional kernel, which is what the CPU runs for F.batch_norm, is right. Nothing about the call
// shows it (no regrown output, Note [Unfaithful out kernels]), so these operators run their .out
// kernel only for such inputs and the functional one otherwise, decided per call from the input's
// own layout, never from the calls seen before.
bool outNeedsContiguousInput(const c10::OperatorName& name) {
  const std::string_view op = name.name;
  return op == "aten::native_batch_norm" || op == "aten::_native_batch_norm_legit" ||
         op == "aten::_native_batch_norm_legit_no_training" ||
         op == "aten::_batch_norm_with_update";
}

// [marker: engine-foreign-operators]
// Operators of other namespaces (custom operators: torch.library.custom_op, other libraries) may
// have CPU kernels written in Python. A worker must never run Python: it would need the GIL, which
// the host may hold while it waits for that very task (Note [Tasks hold no Python-visible tensor]
// in KernelAlias.h). They run on the synchronizing path, on the calling thread. A library that
// wants the asynchronous path registers a PrivateUse1 kernel (csrc/aten/FusedBiasGelu.cpp).
bool onCallingThread(const c10::OperatorName& name) {
  return name.name.rfind("aten::", 0) != 0 && name.name.rfind("prims::", 0) != 0;
}

// [marker: engine-scalar-kinds]
// The arguments whose values no Meta kernel derives a shape from (Note [Scalar values are not
// keyed] in ShapeCache.h): Scalar, Scalar?, Scalar[], float, float?. Not arange's and range's,
// whose Scalars bound the result.
bool scalarsSetShape(const c10::OperatorName& name) {
  return name.name == "aten::arange" || name.name == "aten::range";
}

bool keyedByKind(const c10::TypePtr& type) {
  c10::TypePtr element = type;
  if (auto optional = type->cast<c10::OptionalType>()) element = optional->getElementType();
  if (element->kind() == c10::TypeKind::FloatType) return true;
  if (auto list = element->cast<c10::ListType>()) element = list->getElementType();
  return element->kind() == c10::TypeKind::NumberType;
}

std::unique_ptr<OpTraits> computeTraits(const c10::FunctionSchema& schema) {
  auto traits = std::make_unique<OpTraits>(schema.operator_name());
  traits->shapesFromCpu = metaShapesDisagree(schema.operator_name());
  traits->cppMeta = cppMetaKernel(schema.operator_name());
  traits->outKeepsShapeOfSameCount = sequenceOut(schema.operator_name());
  traits->overwritesSelf = overwritesSelf(schema.operator_name());
  traits->outNeedsContiguousInput = outNeedsContiguousInput(schema.operator_name());
  traits->callingThread = onCallingThread(schema.operator_name());
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const auto& arg = schema.arguments()[i];
    auto list = arg.type()->cast<c10::ListType>();
    if (list && list->getElementType()->kind() == c10::TypeKind::OptionalType &&
        isTensorType(list->getElementType())) {
      traits->indexLists.push_back(i);
    }
    if (arg.alias_info() != nullptr && arg.alias_info()->isWrite()) {
      traits->mutates = true;
      if (i < 64 && arg.type()->kind() == c10::TypeKind::TensorType)
        traits->writtenTensors |= uint64_t{1} << i;
    }
    if (i < 64 && keyedByKind(arg.type()) && !scalarsSetShape(schema.operator_name()))
      traits->kindOnlyArguments |= uint64_t{1} << i;
    if (isGeneratorType(arg.type()) && !traits->random) {
      traits->random = true;
      traits->generatorIndex = static_cast<int>(i);
    }
  }
  bool newTensors = false;
  for (size_t i = 0; i < schema.returns().size(); ++i) {
    const auto& ret = schema.returns()[i];
    if (ret.alias_info() == nullptr || !ret.alias_info()->isWrite())
      traits->newReturns.push_back(i);
    if (!isTensorType(ret.type())) traits->hostResult = true;
    if (ret.alias_info() == nullptr) {
      newTensors = newTensors || isTensorType(ret.type());
    } else if (!ret.alias_info()->isWrite()) {
      traits->view = true;
    }
  }
  // Operators that write arguments and also return new tensors (native_batch_norm updating its
  // running statistics) take the functional route: new results are allocated, written arguments
  // are written through their aliases.
  if (newTensors) traits->mutates = false;
  traits->inPlaceOnly = traits->mutates;
  for (const auto& arg : schema.arguments()) {
    if (arg.is_out()) traits->inPlaceOnly = false;
  }
  const auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(
      schema.name().c_str(), schema.overload_name().c_str());
  traits->cpuKernel = handle.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU);
  traits->cpuGeneratorOnly = !traits->random && handle.hasTag(at::Tag::nondeterministic_seeded);
  if (!traits->mutates && !traits->view && !traits->hostResult) {
    traits->outVariant = findOutVariant(schema);
  }
  return traits;
}

}  // namespace

bool isGeneratorType(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  auto optional = type->cast<c10::OptionalType>();
  return optional && optional->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

bool isTensorType(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) return true;
  if (auto optional = type->cast<c10::OptionalType>())
    return isTensorType(optional->getElementType());
  if (auto list = type->cast<c10::ListType>()) return isTensorType(list->getElementType());
  return false;
}

// [marker: op-traits]
// Traits live for the process, each at a stable address, in one map under a mutex; every thread
// keeps its own map of the operators it has seen, so the common case takes no lock. Maps are keyed
// by the schema's address, and an entry is checked against the operator's name: a schema freed
// with its library (a Python torch.library scope) may leave its address to another operator.
OpTraits& traitsFor(const c10::OperatorHandle& op) {
  const c10::FunctionSchema* key = &op.schema();
  thread_local std::unordered_map<const c10::FunctionSchema*, OpTraits*> seen;
  if (auto it = seen.find(key); it != seen.end() && it->second->name == op.operator_name())
    return *it->second;

  static std::mutex mutex;
  static std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpTraits>> all;
  static std::vector<std::unique_ptr<OpTraits>> retired;  // other threads may still point here
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<OpTraits>& traits = all[key];
  if (traits && traits->name != op.operator_name()) retired.push_back(std::move(traits));
  if (!traits) {
    traits = computeTraits(op.schema());
    traits->callChecks = callChecksFor(op.schema());
    // Note [Call checks are remembered] in CallChecks.h
    if (traits->callChecks.readValues) traits->kindOnlyArguments = 0;
  }
  seen[key] = traits.get();
  return *traits;
}

}  // namespace openreg::engine
