# install_consumer (label cpu): installs this build into a scratch prefix with
# `cmake --install`, then configures, builds and runs examples/consumer against it through
# find_package(moe_ep) and CMAKE_PREFIX_PATH, as a user of the package would. The work is done by
# tests/install/check_consumer.cmake (script mode) so it runs at test time, after the build.
add_test(NAME install_consumer
         COMMAND ${CMAKE_COMMAND}
                 -DBUILD_DIR=${PROJECT_BINARY_DIR}
                 -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
                 -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/install_consumer
                 -DCONFIG=$<CONFIG>
                 -DGENERATOR=${CMAKE_GENERATOR}
                 -DMAKE_PROGRAM=${CMAKE_MAKE_PROGRAM}
                 -DCXX_COMPILER=${CMAKE_CXX_COMPILER}
                 -DEXPECT_CUDA=${MOE_EP_HAVE_CUDA}
                 -P ${PROJECT_SOURCE_DIR}/tests/install/check_consumer.cmake)
# Configuring the consumer from scratch takes a few seconds; linking a CUDA build takes longer.
set_tests_properties(install_consumer PROPERTIES LABELS cpu TIMEOUT 600)
