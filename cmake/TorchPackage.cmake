# Finds the installed torch package's headers and libraries by asking its Python, instead of
# find_package(Torch). Note [Building against any build of torch]: TorchConfig.cmake of a CUDA
# build (PyPI's x86-64 wheels) includes Caffe2's cuda.cmake, which stops without a CUDA toolkit,
# and ${TORCH_LIBRARIES} would link torch_cuda. The backend needs c10, torch_cpu and, for the
# Python extension, torch_python: the same libraries in the CPU and the CUDA builds of a release.
#
# Defines the imported targets torch::c10, torch::torch_cpu and torch::torch_python, and
#   TORCH_INSTALL_PREFIX   the package directory (site-packages/torch)
#   OPENREG_TORCH_VERSION  torch.__version__ (e.g. 2.14.1 or 2.13.0+cpu)
#   OPENREG_TORCH_CXX11_ABI True or False (recorded in _build_info.py, checked at import)
# Needs Python3_EXECUTABLE.

# Autoload off: the question is about torch itself, and our own package may be half-built.
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env TORCH_DEVICE_BACKEND_AUTOLOAD=0 ${Python3_EXECUTABLE} -c
    "import os, torch; print(os.path.dirname(torch.__file__), torch.__version__, bool(torch._C._GLIBCXX_USE_CXX11_ABI), sep=';', end='')"
  WORKING_DIRECTORY ${CMAKE_BINARY_DIR}
  OUTPUT_VARIABLE _torch_info RESULT_VARIABLE _torch_result ERROR_VARIABLE _torch_error)
if(NOT _torch_result EQUAL 0)
  message(FATAL_ERROR "${Python3_EXECUTABLE} cannot import torch:\n${_torch_error}")
endif()
list(GET _torch_info 0 TORCH_INSTALL_PREFIX)
list(GET _torch_info 1 OPENREG_TORCH_VERSION)
list(GET _torch_info 2 OPENREG_TORCH_CXX11_ABI)
message(STATUS "torch ${OPENREG_TORCH_VERSION} at ${TORCH_INSTALL_PREFIX}")

# The compile definitions torch_cpu's CMake target carries (c10d's headers read USE_DISTRIBUTED
# and USE_C10D_GLOO); the wheels of every flavour are built with them.
foreach(_lib c10 torch_cpu torch_python)
  find_library(_path ${_lib} PATHS "${TORCH_INSTALL_PREFIX}/lib" REQUIRED NO_DEFAULT_PATH NO_CACHE)
  add_library(torch::${_lib} SHARED IMPORTED)
  set_target_properties(torch::${_lib} PROPERTIES IMPORTED_LOCATION "${_path}")
  unset(_path)
endforeach()
set_target_properties(torch::c10 PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${TORCH_INSTALL_PREFIX}/include;${TORCH_INSTALL_PREFIX}/include/torch/csrc/api/include")
set_target_properties(torch::torch_cpu PROPERTIES
  INTERFACE_LINK_LIBRARIES torch::c10
  INTERFACE_COMPILE_DEFINITIONS "USE_DISTRIBUTED;USE_C10D_GLOO")
set_target_properties(torch::torch_python PROPERTIES INTERFACE_LINK_LIBRARIES torch::torch_cpu)
