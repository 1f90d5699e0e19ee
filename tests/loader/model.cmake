# SPDX-License-Identifier: BSD-2-Clause
# Model file index (src/loader/model.c, safetensors.c, gguf.c) and SHA-256
# (src/loader/sha256.c): files built in memory by the tests, no fixtures.
# The tests use the library's internal headers (loader/sha256.h).
foreach(t test_model test_sha256)
  add_executable(${t} ${CMAKE_CURRENT_LIST_DIR}/${t}.c)
  target_include_directories(${t} PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(${t} PRIVATE gpunvme)
endforeach()
# safetensors and GGUF: layouts, every dtype / ggml type, every truncation,
# every refusal with its errno and message, tensor name patterns
add_test(NAME loader.model COMMAND test_model)
set_tests_properties(loader.model PROPERTIES LABELS loader TIMEOUT 300)
# NIST vectors, split updates, throughput (printed)
add_test(NAME loader.sha256 COMMAND test_sha256)
set_tests_properties(loader.sha256 PROPERTIES LABELS loader TIMEOUT 300)
