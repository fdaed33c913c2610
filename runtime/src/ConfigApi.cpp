// Entry points of runtime.h's "Configuration" section: the registry of variables and the values
// in effect (Note [Configuration variables] in ConfigVariables.h).
#include <openreg/runtime.h>

#include <string>

#include "ConfigVariables.h"
#include "Runtime.h"

using namespace openreg;

extern "C" {

orError_t orConfigGetVariableCount(int* count) {
  OR_REQUIRE_NOT_NULL(count);
  *count = static_cast<int>(configVariables().size());
  return orSuccess;
}

orError_t orConfigGetVariable(int index, orConfigVariable* variable) {
  OR_REQUIRE_NOT_NULL(variable);
  const auto variables = configVariables();
  if (index < 0 || index >= static_cast<int>(variables.size())) {
    return fail(orErrorInvalidValue, OR_DEVICE_NAME ": orConfigGetVariable: index " +
                                         std::to_string(index) + " is not from 0 to " +
                                         std::to_string(variables.size() - 1));
  }
  *variable = variables[index].shown;
  return orSuccess;
}

orError_t orConfigGetValue(const char* name, const char** value, orConfigSource* source) {
  OR_REQUIRE_NOT_NULL(name);
  OR_REQUIRE_NOT_NULL(value);
  const ConfigVariable* variable = findConfigVariable(name);
  if (variable == nullptr) {
    return fail(orErrorInvalidValue, std::string(OR_DEVICE_NAME ": orConfigGetValue: ") + name +
                                         " is not a variable of openreg's (docs/runtime.md, "
                                         "\"Configuration\")");
  }
  thread_local std::string text;
  const char* environment = environmentText(*variable);
  if (source != nullptr)
    *source = environment != nullptr ? orConfigSourceEnvironment : orConfigSourceDefault;
  if (std::string_view(variable->shown.reader) == "runtime") {
    OR_ENTER_CONFIGURED();
    configValueText(runtime().config, name, &text);
  } else if (environment != nullptr) {
    if (std::string error = parseConfigText(*variable, environment, nullptr, nullptr);
        !error.empty())
      return fail(orErrorInvalidValue, std::move(error));
    text = environment;
  } else {
    text = variable->defaultValue;
  }
  *value = text.c_str();
  return orSuccess;
}

orError_t orConfigRefuseValue(const char* name, const char* value, const char* reason) {
  OR_REQUIRE_NOT_NULL(name);
  OR_REQUIRE_NOT_NULL(value);
  const ConfigVariable* variable = findConfigVariable(name);
  if (variable == nullptr) {
    return fail(orErrorInvalidValue, std::string(OR_DEVICE_NAME ": orConfigRefuseValue: ") + name +
                                         " is not a variable of openreg's");
  }
  return fail(orErrorInvalidValue,
              invalidValueMessage(*variable, value, reason != nullptr ? reason : ""));
}

}  // extern "C"
