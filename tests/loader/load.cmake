# SPDX-License-Identifier: BSD-2-Clause
# `gpunvme load` (label loader): one ctest test per group of load_test.sh.
# The fixture groups load every model file of the fragmented ext4/XFS images
# of tests/loader/fixtures (scripts/fixtures/make-model-fixtures.sh) and
# compare each tensor with the manifest; `mkmodel` checks the generator
# alone; `roundtrip` builds images of random-data models with mkfs at test
# time, `pieces` one of 1.1 GiB (a load in pieces larger than 64 MiB). Skipped (77) without zstd, python3 or the mkfs tool a group needs.
set(GPUNVME_LOAD_TEST_GROUPS json_ext4 json_xfs tensors_glob verify tier_cpu bad_inputs usage mkmodel roundtrip queue_sweep pieces)
foreach(g IN LISTS GPUNVME_LOAD_TEST_GROUPS)
  add_test(NAME loader.load.${g}
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/load_test.sh $<TARGET_FILE:gpunvme-cli> ${g}
            $<TARGET_FILE:gpunvme-mkmodel>)
  set_tests_properties(loader.load.${g} PROPERTIES LABELS loader TIMEOUT 600 SKIP_RETURN_CODE 77)
endforeach()

# Models in several files (tests/loader/modelset_test.sh): Hugging Face
# shards + index, split GGUF, and the inconsistent sets that must be refused.
foreach(g sets bad)
  add_test(NAME loader.modelset.${g}
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/modelset_test.sh $<TARGET_FILE:gpunvme-cli> ${g}
            $<TARGET_FILE:gpunvme-mkmodel>)
  set_tests_properties(loader.modelset.${g} PROPERTIES LABELS loader TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()
