#include "aten/engine/CppMeta.h"

namespace openreg::engine {

// The generated parts (gen_cpp_meta.py writes four, compiled in parallel).
void addCppMetaPart0(CppMetaTable& table);
void addCppMetaPart1(CppMetaTable& table);
void addCppMetaPart2(CppMetaTable& table);
void addCppMetaPart3(CppMetaTable& table);

const c10::KernelFunction* cppMetaKernel(const c10::OperatorName& name) {
  static const CppMetaTable table = [] {
    CppMetaTable all;
    addCppMetaPart0(all);
    addCppMetaPart1(all);
    addCppMetaPart2(all);
    addCppMetaPart3(all);
    return all;
  }();
  const auto it = table.find(name);
  return it == table.end() ? nullptr : &it->second;
}

}  // namespace openreg::engine
