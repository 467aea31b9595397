# Python tests (tests/python, pytest), when the Python package is built (MOE_EP_BUILD_PYTHON):
#   python_cpu          the CPU-backend suite on numpy arrays (label cpu)
#   python_cpu_unvalidated  its tests of duplicate expert ids again with MOE_EP_VALIDATE=0, where
#                       they take the branch that accepts the duplicates (label cpu)
#   python_gpu          tests/python/test_gpu_*.py on torch tensors (processes per GPU, and two
#                       ranks of one GPU from threads, decode mode in torch.cuda.graph); they
#                       skip themselves without torch or GPUs
#                       (label gpu)
#   python_pip_install  `pip install --no-build-isolation .` into a fresh venv, then an import
#                       and one CPU dispatch from outside the source tree (label cpu)
#   python_report       tests/python/test_report.py: `python -m moe_ep.report` on the JSON of
#                       CPU-backend benches, given the moe-ep binary in MOE_EP_BIN (label cpu;
#                       python_cpu collects it too and skips it, having no MOE_EP_BIN)
if(NOT MOE_EP_HAVE_PYTHON)
  return()
endif()

set(_py_env "PYTHONPATH=${CMAKE_BINARY_DIR}/python" "MOE_EP_VALIDATE=1"
            "PYTHONDONTWRITEBYTECODE=1")
add_test(NAME python_cpu
         COMMAND ${MOE_EP_PYTHON_EXECUTABLE} -m pytest -q -p no:cacheprovider -rs
                 --ignore-glob=*test_gpu_*.py ${CMAKE_CURRENT_SOURCE_DIR}/python)
set_tests_properties(python_cpu PROPERTIES LABELS cpu ENVIRONMENT "${_py_env}" TIMEOUT 600)
add_test(NAME python_cpu_unvalidated
         COMMAND ${MOE_EP_PYTHON_EXECUTABLE} -m pytest -q -p no:cacheprovider -rs
                 -k duplicate_expert_ids ${CMAKE_CURRENT_SOURCE_DIR}/python/test_cpu_ops.py
                 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_decode_cpu.py)
list(TRANSFORM _py_env REPLACE "^MOE_EP_VALIDATE=1$" "MOE_EP_VALIDATE=0"
     OUTPUT_VARIABLE _py_env_unvalidated)
set_tests_properties(python_cpu_unvalidated PROPERTIES LABELS cpu TIMEOUT 300
                     ENVIRONMENT "${_py_env_unvalidated}")

# -v names each test as it starts, and faulthandler_timeout (pytest's own) prints every thread's
# Python stack when one test runs past 240 s, so a stalled GPU test names where it stalled in the
# log of this test (ctest shows it with --output-on-failure once the 900 s limit ends the test).
add_test(NAME python_gpu
         COMMAND ${MOE_EP_PYTHON_EXECUTABLE} -m pytest -v -p no:cacheprovider -rs -s
                 -o faulthandler_timeout=240
                 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_gpu_torch.py
                 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_gpu_single_gpu_world.py
                 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_gpu_decode_graph.py
                 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_gpu_decode_scale_layout.py)
set_tests_properties(python_gpu PROPERTIES LABELS gpu ENVIRONMENT "${_py_env}" TIMEOUT 900)

add_test(NAME python_pip_install
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/python/pip_install_check.sh
                 ${MOE_EP_PYTHON_EXECUTABLE} ${CMAKE_BINARY_DIR}/pip-check)
set_tests_properties(python_pip_install PROPERTIES LABELS cpu TIMEOUT 1200
                     ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")

# examples/decode_loop.py on the CPU backend: a decode loop of a small MoE layer through decode
# mode, checked against float64 (label cpu)
add_test(NAME python_example_decode_loop
         COMMAND ${MOE_EP_PYTHON_EXECUTABLE} ${CMAKE_SOURCE_DIR}/examples/decode_loop.py --ranks 4
                 --steps 4 --max-tokens 16 --hidden 512)
set_tests_properties(python_example_decode_loop PROPERTIES LABELS cpu TIMEOUT 300
                     ENVIRONMENT "${_py_env}")

if(TARGET moe-ep)
  add_test(NAME python_report
           COMMAND ${MOE_EP_PYTHON_EXECUTABLE} -m pytest -q -p no:cacheprovider -rs
                   ${CMAKE_CURRENT_SOURCE_DIR}/python/test_report.py)
  set_tests_properties(python_report PROPERTIES LABELS cpu TIMEOUT 300
                       ENVIRONMENT "${_py_env};MOE_EP_BIN=$<TARGET_FILE:moe-ep>")
endif()
