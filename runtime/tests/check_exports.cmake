# Checks that LIBRARY (libopenreg) exports exactly the C API that HEADER (runtime.h) declares:
# every defined dynamic symbol is an unmangled `or` name declared there with OPENREG_RUNTIME_API,
# and every such declaration is exported. Run by ctest (runtime/CMakeLists.txt).
#   cmake -DLIBRARY=libopenreg.so -DNM=nm -DHEADER=runtime.h -P check_exports.cmake
foreach(var LIBRARY NM HEADER)
  if(NOT ${var})
    message(FATAL_ERROR "check_exports: pass -D${var}=...")
  endif()
endforeach()

execute_process(COMMAND ${NM} -D --defined-only ${LIBRARY}
  OUTPUT_VARIABLE nm_out RESULT_VARIABLE nm_result)
if(NOT nm_result EQUAL 0)
  message(FATAL_ERROR "check_exports: ${NM} -D --defined-only ${LIBRARY} failed")
endif()
string(REGEX MATCHALL "[^\n]+" lines "${nm_out}")
set(exported "")
set(foreign "")
foreach(line IN LISTS lines)
  # "<address> <type> <name>", the name possibly versioned (name@VERSION).
  if(NOT line MATCHES "^[0-9a-fA-F]+ ([A-Za-z]) ([^ @]+)")
    message(FATAL_ERROR "check_exports: cannot read nm's line '${line}'")
  endif()
  set(name "${CMAKE_MATCH_2}")
  if(name MATCHES "^or[A-Z][A-Za-z0-9]*$")
    list(APPEND exported "${name}")
  else()
    list(APPEND foreign "${name}")
  endif()
endforeach()

file(READ ${HEADER} header)
string(REGEX MATCHALL "OPENREG_RUNTIME_API[^;(]*[ *](or[A-Z][A-Za-z0-9]*)\\(" decls "${header}")
set(declared "")
foreach(decl IN LISTS decls)
  string(REGEX MATCH "(or[A-Z][A-Za-z0-9]*)\\($" name "${decl}")
  list(APPEND declared "${CMAKE_MATCH_1}")
endforeach()

set(missing ${declared})
list(REMOVE_ITEM missing ${exported})
set(undeclared ${exported})
list(REMOVE_ITEM undeclared ${declared})
list(LENGTH declared declared_count)
list(LENGTH exported exported_count)
if(foreign OR missing OR undeclared OR declared_count EQUAL 0)
  message(FATAL_ERROR "check_exports: ${LIBRARY} must export exactly runtime.h's C API.\n"
    "  exported, not C API names: ${foreign}\n"
    "  declared in runtime.h, not exported: ${missing}\n"
    "  exported, not declared in runtime.h: ${undeclared}\n"
    "  (${declared_count} declared, ${exported_count} exported)")
endif()
message(STATUS "check_exports: ${exported_count} symbols, all C, all declared in runtime.h")
