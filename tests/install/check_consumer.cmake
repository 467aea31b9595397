# Script mode (cmake -P) half of the install_consumer test, see tests/install.cmake.
# Inputs (-D): BUILD_DIR, SOURCE_DIR, WORK_DIR, CONFIG, GENERATOR, MAKE_PROGRAM, CXX_COMPILER,
# EXPECT_CUDA (the library's MOE_EP_HAVE_CUDA). Every step must succeed and the consumer must
# print "consumer OK".

function(run_step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: ${name} failed (${rc}):\n"
                        "command: ${ARGN}\n${out}\n${err}")
  endif()
  set(step_output "${out}${err}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK_DIR}/prefix)
set(consumer_build ${WORK_DIR}/consumer-build)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

set(config_args "")
if(CONFIG)
  set(config_args --config ${CONFIG})
endif()

# 1. Install the library, headers and package files into the scratch prefix.
run_step("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix}
         ${config_args})

# 2. The installed package must not point back into the source or build tree: it has to work
#    from the prefix alone.
file(GLOB_RECURSE package_files ${prefix}/*.cmake)
if(NOT package_files)
  message(FATAL_ERROR "install_consumer: no package files (*.cmake) installed under ${prefix}")
endif()
foreach(file IN LISTS package_files)
  file(READ ${file} text)
  foreach(tree IN ITEMS ${SOURCE_DIR} ${BUILD_DIR})
    string(FIND "${text}" "${tree}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "install_consumer: ${file} refers to ${tree}")
    endif()
  endforeach()
endforeach()

# 3. Configure and build the consumer against the prefix only.
set(generator_args -G ${GENERATOR})
if(MAKE_PROGRAM)
  list(APPEND generator_args -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()
set(build_type ${CONFIG})
if(NOT build_type)
  set(build_type Release)
endif()
run_step("configure consumer" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/consumer
         -B ${consumer_build} ${generator_args} -DCMAKE_BUILD_TYPE=${build_type}
         -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${prefix})
message(STATUS "${step_output}")
if(EXPECT_CUDA AND NOT step_output MATCHES "CUDA backend ON")
  message(FATAL_ERROR "install_consumer: the library has the CUDA backend but the installed "
                      "package does not say so (moe_ep_HAVE_CUDA)")
endif()
run_step("build consumer" ${CMAKE_COMMAND} --build ${consumer_build} ${config_args})

# 4. Run it: exit 0 and "consumer OK".
find_program(consumer NAMES consumer PATHS ${consumer_build} ${consumer_build}/${CONFIG}
             NO_DEFAULT_PATH NO_CACHE REQUIRED)
run_step("run consumer" ${consumer})
message(STATUS "${step_output}")
if(NOT step_output MATCHES "consumer OK")
  message(FATAL_ERROR "install_consumer: consumer did not print 'consumer OK'")
endif()
