# SPDX-License-Identifier: BSD-2-Clause
# Model file index (src/loader/model.c, safetensors.c, gguf.c) and SHA-256
# (src/loader/sha256.c): files built in memory by the tests, no fixtures.
# Public API only (gpunvme/model.h, gpunvme/sha256.h), plus the header-only
# file writer gpunvme-mkmodel uses (src/cli/model_writer.h).
foreach(t test_model test_sha256)
  add_executable(${t} ${CMAKE_CURRENT_LIST_DIR}/${t}.c)
  target_link_libraries(${t} PRIVATE gpunvme)
endforeach()
target_include_directories(test_model PRIVATE ${PROJECT_SOURCE_DIR}/src)
# safetensors and GGUF: layouts, every dtype / ggml type, every truncation,
# every refusal with its errno and message, tensor name patterns
add_test(NAME loader.model COMMAND test_model)
set_tests_properties(loader.model PROPERTIES LABELS loader TIMEOUT 300)
# NIST vectors, split updates, throughput (printed)
add_test(NAME loader.sha256 COMMAND test_sha256)
set_tests_properties(loader.sha256 PROPERTIES LABELS loader TIMEOUT 300)
