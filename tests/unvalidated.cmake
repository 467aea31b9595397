# GPU tests that need validation off (MOE_EP_VALIDATE=0): their discovered entries run under the
# suite's MOE_EP_VALIDATE=1 and skip, so each also runs here, by filter, with validation off.
# Labelled `gpu` like the rest of its executable; a skip (no GPU) is reported as one.
if(NOT TARGET test_gpu_backend)
  return()
endif()

add_test(NAME unvalidated.GpuBackend.RepeatedExpertsInATokenEqualCpu
         COMMAND test_gpu_backend --gtest_filter=GpuBackendUnvalidated.RepeatedExpertsInATokenEqualCpu)
set_tests_properties(unvalidated.GpuBackend.RepeatedExpertsInATokenEqualCpu PROPERTIES
                     LABELS gpu ENVIRONMENT "MOE_EP_VALIDATE=0" TIMEOUT 120
                     SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")

add_test(NAME unvalidated.GpuBackend.NonFiniteBlocksEqualCpu
         COMMAND test_gpu_backend --gtest_filter=GpuBackendUnvalidated.NonFiniteBlocksEqualCpu)
set_tests_properties(unvalidated.GpuBackend.NonFiniteBlocksEqualCpu PROPERTIES
                     LABELS gpu ENVIRONMENT "MOE_EP_VALIDATE=0" TIMEOUT 120
                     SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")

# Runs validated too (its discovered entry); here its count_kernel scans the ids only.
add_test(NAME unvalidated.GpuBackend.OneSmBudgetEqualsCpu
         COMMAND test_gpu_backend --gtest_filter=GpuBackend.OneSmBudgetEqualsCpu)
set_tests_properties(unvalidated.GpuBackend.OneSmBudgetEqualsCpu PROPERTIES
                     LABELS gpu ENVIRONMENT "MOE_EP_VALIDATE=0" TIMEOUT 120
                     SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
