// The registry of every environment variable openreg reads.
//
// [marker: config-registry]
// Note [Configuration variables]
// Each variable is declared once, in kDeclarations (ConfigVariables.cpp): its name, the layer
// that reads it, its default, its range or choices and what it means. Everything else is derived
// from that entry: the runtime parses its own variables through it at configuration (Config.cpp);
// the PyTorch layer and the Python package read theirs through orConfigGetValue, which validates a
// value by the same entry; an invalid value's message quotes the entry's "accepted" text;
// `python -m torch_openreg` prints every entry with the value in effect and where it came from;
// README.md's table is generated from it (tools/config_table.py), and tests/test_config.py checks
// that the README holds that table and that nothing in the runtime, the PyTorch layer or the
// package reads an openreg variable any other way.
#pragma once

#include <openreg/runtime.h>

#include <array>
#include <span>
#include <string>
#include <string_view>

namespace openreg {

enum class ConfigKind {
  Integer,  // a decimal integer in [lo, hi]
  Bytes,    // a byte count in [lo, hi], optionally with a K, M, G or T suffix
  Choice,   // one of `choices`
  Text,     // free text, parsed by the layer that reads it (its own errors name the variable)
};

struct ConfigVariable {
  orConfigVariable shown;  // name, reader, default as documented, accepted, meaning
  ConfigKind kind;
  const char* defaultValue;  // the value when unset, as text; nullptr: computed (device memory)
  long long lo = 0, hi = 0;
  std::array<const char*, 4> choices{};
};

std::span<const ConfigVariable> configVariables();
const ConfigVariable* findConfigVariable(std::string_view name);

// The one format of an invalid value, whichever layer parses it (orConfigRefuseValue):
// "openreg: invalid NAME='text': REASON; expected <accepted>." ("REASON; " only when given).
std::string invalidValueMessage(const ConfigVariable& variable, std::string_view text,
                                std::string_view reason = {});

// The variable's text in the environment, or nullptr when it is unset or empty.
const char* environmentText(const ConfigVariable& variable);

// Parses `text` as `variable` accepts it: an Integer or Bytes value into *number, a Choice into
// *choice (its index in `choices`); Text is accepted as it is. Returns "" on success, else the
// message (invalidValueMessage).
std::string parseConfigText(const ConfigVariable& variable, const char* text, long long* number,
                            int* choice);

}  // namespace openreg
