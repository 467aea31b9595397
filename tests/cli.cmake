# Tests of the `moe-ep` command line (docs/bench.md), labelled `cpu`: small checked benches that
# must end in "# wrong: 0 OK" (normal and decode mode), the --json output of both modes (one token
# size, a --tokens list, and lists of dtypes), several nodes (--ranks-per-node),
# `moe-ep config`, and one test per bad argument
# asserting exit code 2 and a single stderr line that names the argument and the value (also
# for moe-ep-link-floor and moe-ep-latency-floor, when built).
# The drivers are tests/cli/*.sh; each test runs in well under 10 s on two cores.
if(NOT TARGET moe-ep)
  return()
endif()

set(MOE_EP_CLI_DIR ${CMAKE_CURRENT_LIST_DIR}/cli)
set(MOE_EP_CLI $<TARGET_FILE:moe-ep>)

# moe_ep_cli_ok(name PATTERN... -- ARGS...): moe-ep ARGS exits 0 and prints every PATTERN.
function(moe_ep_cli_ok name)
  add_test(NAME cli_${name} COMMAND bash ${MOE_EP_CLI_DIR}/expect_output.sh ${ARGN})
  set_tests_properties(cli_${name} PROPERTIES LABELS cpu TIMEOUT 60
                       ENVIRONMENT "MOE_EP_VALIDATE=1")
endfunction()

# moe_ep_cli_error(name RC PATTERN... -- COMMAND...): exit RC, one stderr line with every PATTERN.
function(moe_ep_cli_error name)
  add_test(NAME cli_${name} COMMAND bash ${MOE_EP_CLI_DIR}/expect_error.sh ${ARGN})
  set_tests_properties(cli_${name} PROPERTIES LABELS cpu TIMEOUT 60)
endfunction()

# Checked benches: every pair, bit-exact against the reference of src/reference.
set(small --hidden 256 --iters 2 --warmup 1)
moe_ep_cli_ok(bench_small "# wrong: 0 OK" --
              ${MOE_EP_CLI} bench --ranks 3 --experts 12 --topk 5 --tokens 1 ${small})
moe_ep_cli_ok(bench_world1 "# wrong: 0 OK" "ranks 1" --
              ${MOE_EP_CLI} bench --ranks 1 --experts 4 --topk 2 --tokens 5 ${small})
moe_ep_cli_ok(bench_zero_tokens "# wrong: 0 OK" --
              ${MOE_EP_CLI} bench --ranks 2 --experts 4 --topk 2 --tokens 0 ${small})
moe_ep_cli_ok(bench_masked "# wrong: 0 OK" "masked 0.5" --
              ${MOE_EP_CLI} bench --ranks 4 --experts 8 --topk 3 --tokens 16 --max-tokens 32
              --masked-fraction 0.5 --seed 3 ${small})
moe_ep_cli_ok(bench_all_masked "# wrong: 0 OK" --
              ${MOE_EP_CLI} bench --ranks 4 --experts 8 --topk 8 --tokens 8 --masked-fraction 1
              ${small})
moe_ep_cli_ok(bench_string_values "fp4      fp8_direct_cast" "# wrong: 0 OK" --
              ${MOE_EP_CLI} bench --ranks 2 --experts 4 --topk 2 --tokens 4
              --dispatch-dtype mxfp4_blockwise --combine-dtype float8_direct_cast ${small})
moe_ep_cli_ok(bench_int8_e3m4 "bf16     int8_e3m4" "fp4      int8_e3m4" "# wrong: 0 OK" --
              ${MOE_EP_CLI} bench --ranks 3 --experts 6 --topk 2 --tokens 8 --dispatch-dtype all
              --combine-dtype int8_e3m4_blockwise ${small})
moe_ep_cli_ok(bench_auto_fp4 "dispatch dtype auto -> fp4" "combine dtype auto -> fp8"
              "fp4      fp8 " "# wrong: 0 OK" --
              ${MOE_EP_CLI} bench --ranks 2 --experts 4 --topk 2 --tokens 4 --weights fp4
              --dispatch-dtype auto --combine-dtype auto ${small})
# hidden 2880 is a multiple of 32 (mxfp4, int8/e3m4) but not of 128 (fp8 blockwise): fp4 + bf16
# and fp4 + int8/e3m4 are valid.
moe_ep_cli_ok(bench_hidden_2880_fp4_bf16 "# wrong: 0 OK" --
              ${MOE_EP_CLI} bench --ranks 2 --experts 4 --topk 2 --tokens 2 --hidden 2880
              --dispatch-dtype fp4 --combine-dtype bf16 --iters 1 --warmup 0)
moe_ep_cli_ok(bench_hidden_2880_fp4_int8_e3m4 "# wrong: 0 OK" --
              ${MOE_EP_CLI} bench --ranks 2 --experts 4 --topk 2 --tokens 2 --hidden 2880
              --dispatch-dtype fp4 --combine-dtype int8_e3m4 --iters 1 --warmup 0)
moe_ep_cli_ok(bench_no_check "# wrong: not checked" --
              ${MOE_EP_CLI} bench --ranks 2 --experts 4 --topk 2 --tokens 4 --no-check ${small})
moe_ep_cli_ok(bench_baseline_none "# wrong: 0 OK" --
              ${MOE_EP_CLI} bench --ranks 2 --experts 4 --topk 2 --tokens 4 --baseline none
              ${small})

add_test(NAME cli_bench_json
         COMMAND bash ${MOE_EP_CLI_DIR}/bench_json.sh ${MOE_EP_CLI}
                 ${CMAKE_CURRENT_BINARY_DIR}/cli_bench_json)
set_tests_properties(cli_bench_json PROPERTIES LABELS cpu TIMEOUT 60)

# Decode mode (--mode decode): low_latency_dispatch / low_latency_combine, checked bit for bit
# against the reference's decode mode, at world sizes 1 to 4, with and without unused slab rows
# (--max-tokens above --tokens), masked slots and a rank without tokens.
moe_ep_cli_ok(bench_decode_all_pairs "mode decode" "bf16     bf16" "fp4      int8_e3m4"
              "# wrong: 0 OK" --
              ${MOE_EP_CLI} bench --backend cpu --mode decode --ranks 3 --experts 12 --topk 5
              --tokens 4 ${small})
moe_ep_cli_ok(bench_decode_world1 "mode decode" "ranks 1" "fp4      fp8 " "# wrong: 0 OK" --
              ${MOE_EP_CLI} bench --backend cpu --mode decode --ranks 1 --experts 4 --topk 2
              --tokens 5 --dispatch-dtype fp4 --combine-dtype fp8 ${small})
moe_ep_cli_ok(bench_decode_masked "mode decode" "masked 0.5" "fp8      fp8_direct_cast"
              "# wrong: 0 OK" --
              ${MOE_EP_CLI} bench --backend cpu --mode decode --ranks 4 --experts 16 --topk 4
              --tokens 16 --max-tokens 32 --masked-fraction 0.5 --seed 3 --dispatch-dtype fp8
              --combine-dtype fp8_direct_cast ${small})
moe_ep_cli_ok(bench_decode_bf16_int8_e3m4 "mode decode" "bf16     int8_e3m4" "# wrong: 0 OK" --
              ${MOE_EP_CLI} bench --backend cpu --mode decode --ranks 2 --experts 8 --topk 3
              --tokens 32 --dispatch-dtype bf16 --combine-dtype int8_e3m4 ${small})
moe_ep_cli_ok(bench_decode_zero_tokens "mode decode" "# wrong: 0 OK" --
              ${MOE_EP_CLI} bench --backend cpu --mode decode --ranks 2 --experts 4 --topk 2
              --tokens 0 ${small})
# --column-major-scales: the decode bench with recv_x_scales column by column, checked as rows
# (reference::copy_low_latency_outputs); normal mode refuses the flag.
moe_ep_cli_ok(bench_decode_column_major_scales "mode decode" "column-major scales"
              "fp8      bf16" "fp4      fp8 " "# wrong: 0 OK" --
              ${MOE_EP_CLI} bench --backend cpu --mode decode --column-major-scales --ranks 3
              --experts 6 --topk 2 --tokens 1,5 --dispatch-dtype fp8,fp4
              --combine-dtype bf16,fp8 ${small})
moe_ep_cli_error(column_major_scales_normal 2 "--column-major-scales=on" "--mode decode" --
                 ${MOE_EP_CLI} bench --backend cpu --column-major-scales)
# --decode-graph round: one graph a round on CUDA, and round_us from 16 rounds in one graph; the
# CPU backend, without graphs, times host calls, and the header says which timing the figures are.
moe_ep_cli_ok(bench_decode_graph_round "mode decode" "--decode-graph round" "round_us"
              "# wrong: 0 OK" --
              ${MOE_EP_CLI} bench --backend cpu --mode decode --decode-graph round --ranks 2
              --experts 4 --topk 2 --tokens 3 --dispatch-dtype fp8 --combine-dtype bf16 ${small})
# --round-us: normal mode's rounds of host calls back to back, a round_us column and its header.
moe_ep_cli_ok(bench_round_us "# round_us (--round-us): 16 rounds of host calls" "round_us"
              "# wrong: 0 OK" --
              ${MOE_EP_CLI} bench --backend cpu --round-us --ranks 2 --experts 4 --topk 2
              --tokens 4 --dispatch-dtype fp8 --combine-dtype bf16 ${small})
moe_ep_cli_ok(bench_mode_normal "mode normal" "# wrong: 0 OK" --
              ${MOE_EP_CLI} bench --backend cpu --mode normal --ranks 2 --experts 4 --topk 2
              --tokens 4 --dispatch-dtype bf16 --combine-dtype bf16 ${small})
# The JSON of decode mode: mode "decode", normal mode's fields, and the same bytes as normal mode.
add_test(NAME cli_bench_decode_json
         COMMAND bash ${MOE_EP_CLI_DIR}/bench_decode_json.sh ${MOE_EP_CLI}
                 ${CMAKE_CURRENT_BINARY_DIR}/cli_bench_decode_json)
set_tests_properties(cli_bench_decode_json PROPERTIES LABELS cpu TIMEOUT 60)

# Dtype lists: --dispatch-dtype fp4,bf16 --combine-dtype int8_e3m4,fp8 runs exactly those 4 pairs,
# in the order given (bench_dtype_lists.sh checks the JSON).
add_test(NAME cli_bench_dtype_lists
         COMMAND bash ${MOE_EP_CLI_DIR}/bench_dtype_lists.sh ${MOE_EP_CLI}
                 ${CMAKE_CURRENT_BINARY_DIR}/cli_bench_dtype_lists)
set_tests_properties(cli_bench_dtype_lists PROPERTIES LABELS cpu TIMEOUT 60
                     ENVIRONMENT "MOE_EP_VALIDATE=1")

# --tokens LIST: one command runs every pair at each size (1 and 8 tokens per rank), in both
# modes; the table gains a tokens column and the JSON has the rows of both sizes, each with
# max_tokens = its size, or --max-tokens when given (bench_tokens_json.sh).
foreach(mode normal decode)
  add_test(NAME cli_bench_tokens_list_${mode}
           COMMAND bash ${MOE_EP_CLI_DIR}/bench_tokens_json.sh ${mode} ${MOE_EP_CLI}
                   ${CMAKE_CURRENT_BINARY_DIR}/cli_bench_tokens_list_${mode})
  set_tests_properties(cli_bench_tokens_list_${mode} PROPERTIES LABELS cpu TIMEOUT 60
                       ENVIRONMENT "MOE_EP_VALIDATE=1")
endforeach()
# 0 tokens stays valid inside a list (a rank without tokens, as with --tokens 0).
moe_ep_cli_ok(bench_tokens_list_zero "tokens 0,3/rank" "# wrong: 0 OK" --
              ${MOE_EP_CLI} bench --backend cpu --mode decode --ranks 2 --experts 4 --topk 2
              --tokens 0,3 --dispatch-dtype bf16 --combine-dtype bf16 ${small})

# --ranks-per-node L: several nodes on the CPU backend (2 of 2 and 4 of 1 ranks, 2 of 4 with
# masked slots), combine checked against the reference's by-node sum, the net bytes of the JSON
# recomputed from the seed's routing; L = W is one node, as without the option
# (bench_nodes_json.sh).
add_test(NAME cli_bench_ranks_per_node
         COMMAND bash ${MOE_EP_CLI_DIR}/bench_nodes_json.sh ${MOE_EP_CLI}
                 ${CMAKE_CURRENT_BINARY_DIR}/cli_bench_ranks_per_node)
set_tests_properties(cli_bench_ranks_per_node PROPERTIES LABELS cpu TIMEOUT 60
                     ENVIRONMENT "MOE_EP_VALIDATE=1")
# Decode mode runs on one node: --ranks-per-node = --ranks is allowed there.
moe_ep_cli_ok(bench_decode_ranks_per_node_world "mode decode" "# wrong: 0 OK" --
              ${MOE_EP_CLI} bench --backend cpu --mode decode --ranks 2 --ranks-per-node 2
              --experts 4 --topk 2 --tokens 4 --dispatch-dtype bf16 --combine-dtype bf16 ${small})
# Decode mode over several nodes (CPU backend): every pair at 4 ranks as 2 nodes of 2, combine
# checked against the reference's by-node sum of the expert-side partials, with the net columns.
moe_ep_cli_ok(bench_decode_ranks_per_node "mode decode" "# nodes: 2 of 2" "d_net_MB"
              "# wrong: 0 OK" --
              ${MOE_EP_CLI} bench --backend cpu --mode decode --ranks 4 --ranks-per-node 2
              --experts 8 --topk 3 --tokens 6 --masked-fraction 0.2 ${small})

# --routing (docs/bench.md#routing): checked benches with Zipf-skewed and group-limited routing in
# both modes, the balance line before each size's rows, and the refusals.
moe_ep_cli_ok(bench_routing_zipf "routing zipf:1.2" "# routing zipf:1.2, 16 tokens: rows received"
              "# routing zipf:1.2, 4 tokens: rows received" "# wrong: 0 OK" --
              ${MOE_EP_CLI} bench --backend cpu --ranks 4 --experts 16 --topk 4 --tokens 16,4
              --routing zipf:1.2 --dispatch-dtype fp8 ${small})
moe_ep_cli_ok(bench_decode_routing_groups "mode decode" "routing groups:4:2"
              "# routing groups:4:2, 8 tokens" "# wrong: 0 OK" --
              ${MOE_EP_CLI} bench --backend cpu --mode decode --ranks 4 --experts 16 --topk 4
              --tokens 8 --masked-fraction 0.2 --routing groups:4:2 ${small})
moe_ep_cli_error(routing_unknown 2 "--routing=skewed" "uniform|zipf:S|groups:G:M" --
                 ${MOE_EP_CLI} bench --backend cpu --routing skewed)
moe_ep_cli_error(routing_zipf_zero 2 "--routing=zipf:0" "must be a number in (0, 8" --
                 ${MOE_EP_CLI} bench --backend cpu --routing zipf:0)
moe_ep_cli_error(routing_groups_not_dividing 2 "--routing=groups:5:2" "--experts=64" --
                 ${MOE_EP_CLI} bench --backend cpu --routing groups:5:2)
moe_ep_cli_error(routing_groups_above_g 2 "--routing=groups:4:5" "G=4" --
                 ${MOE_EP_CLI} bench --backend cpu --routing groups:4:5)
moe_ep_cli_error(routing_groups_too_few_experts 2 "--routing=groups:16:1" "--topk=8" --
                 ${MOE_EP_CLI} bench --backend cpu --routing groups:16:1)

# The node split under mpirun, every branch (tools/bench_world.cc, without MPI).
find_package(fmt CONFIG REQUIRED)
add_executable(bench_world_test bench_world_test.cc ${PROJECT_SOURCE_DIR}/tools/bench_world.cc)
target_include_directories(bench_world_test PRIVATE ${PROJECT_SOURCE_DIR}/tools)
target_compile_definitions(bench_world_test PRIVATE MOE_EP_BENCH_HAS_MPI=0)
target_link_libraries(bench_world_test PRIVATE moe_ep fmt::fmt GTest::gtest GTest::gtest_main)
gtest_discover_tests(bench_world_test PROPERTIES LABELS cpu DISCOVERY_TIMEOUT 60)

# The bench's inputs (tools/bench_inputs.cc): the routings of --routing and the balance counts.
add_executable(bench_inputs_test bench_inputs_test.cc ${PROJECT_SOURCE_DIR}/tools/bench_inputs.cc)
target_include_directories(bench_inputs_test PRIVATE ${PROJECT_SOURCE_DIR}/tools
                                                     ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(bench_inputs_test PRIVATE moe_ep moe_ep_internal fmt::fmt GTest::gtest
                                                GTest::gtest_main)
gtest_discover_tests(bench_inputs_test PROPERTIES LABELS cpu DISCOVERY_TIMEOUT 60)

# One rank per process under mpirun (tools/bench_world.h), when moe-ep was built with MPI and
# mpirun is there: the whole distributed path at -np 1 on the CPU backend (its own rank against
# the reference of all ranks, times and checks gathered, process 0 prints), and the refusals
# that every process agrees on at -np 2, before any GPU is touched. Runs with more than one GPU
# per process world need GPUs (docs/bench.md).
get_property(moe_ep_bench_has_mpi GLOBAL PROPERTY MOE_EP_BENCH_HAS_MPI)
find_program(MOE_EP_MPIRUN NAMES mpirun)
if(moe_ep_bench_has_mpi AND MOE_EP_MPIRUN)
  function(moe_ep_cli_mpi name want np)
    add_test(NAME cli_mpi_${name}
             COMMAND bash ${MOE_EP_CLI_DIR}/expect_mpi.sh ${want} ${ARGN})
    set_tests_properties(cli_mpi_${name} PROPERTIES LABELS cpu TIMEOUT 150
                         ENVIRONMENT "MOE_EP_VALIDATE=1")
  endfunction()
  set(mpi_small --experts 4 --topk 2 --tokens 5 ${small})
  moe_ep_cli_mpi(np1_normal ok 1 "# launch: mpirun, one rank per process" "ranks 1"
                 "# processes (rank@host:GPU): 0@"
                 "# wrong: 0 OK" -- ${MOE_EP_MPIRUN} 1 ${MOE_EP_CLI} bench --backend cpu
                 ${mpi_small})
  moe_ep_cli_mpi(np1_decode ok 1 "mode decode" "# launch: mpirun" "# wrong: 0 OK" --
                 ${MOE_EP_MPIRUN} 1 ${MOE_EP_CLI} bench --backend cpu --mode decode ${mpi_small})
  moe_ep_cli_mpi(np2_cpu_refused fail 2
                 "--backend=cpu: the cpu backend runs every rank as a thread of one process" --
                 ${MOE_EP_MPIRUN} 2 ${MOE_EP_CLI} bench --backend cpu ${mpi_small})
  moe_ep_cli_mpi(np2_ranks_refused fail 2
                 "--ranks=3: under mpirun each process is one rank: --ranks must be mpirun's -np (2)"
                 -- ${MOE_EP_MPIRUN} 2 ${MOE_EP_CLI} bench --ranks 3 ${mpi_small})
  moe_ep_cli_mpi(np2_node_split_refused fail 2
                 "--ranks-per-node=1 but rank 0's host runs 2 rank(s), 0-1" --
                 ${MOE_EP_MPIRUN} 2 ${MOE_EP_CLI} bench --ranks-per-node 1 ${mpi_small})
  moe_ep_cli_mpi(np4_node_split_refused fail 4
                 "--ranks-per-node=2 but rank 0's host runs 4 rank(s), 0-3" --
                 ${MOE_EP_MPIRUN} 4 ${MOE_EP_CLI} bench --ranks-per-node 2 ${mpi_small})
  moe_ep_cli_mpi(np2_baseline_refused fail 2
                 "--baseline=nccl: the NCCL baseline runs with a thread per GPU only, not yet under mpirun" --
                 ${MOE_EP_MPIRUN} 2 ${MOE_EP_CLI} bench --baseline nccl ${mpi_small})
endif()

# moe-ep config: resolution, sources, warnings, knobs.
moe_ep_cli_ok(config_fp4 "mxfp4_blockwise" "float8_blockwise" "auto: weights mxfp4" "knobs:"
              "MOE_EP_TIMEOUT_S" -- ${MOE_EP_CLI} config --weights fp4)
moe_ep_cli_ok(config_env "source: env" "MOE_EP_DISPATCH_DTYPE=fp8" --
              env MOE_EP_DISPATCH_DTYPE=fp8 ${MOE_EP_CLI} config)
moe_ep_cli_ok(config_deprecated "deprecated" "MOE_EP_FP8_DISP=1" --
              env MOE_EP_FP8_DISP=1 ${MOE_EP_CLI} config)

# Bad arguments: exit 2, one line naming the argument and the value.
moe_ep_cli_error(hidden_7100_fp8 2 "--hidden=7100" "128" "float8_blockwise" --
                 ${MOE_EP_CLI} bench --hidden 7100 --dispatch-dtype fp8)
moe_ep_cli_error(hidden_7100_fp4 2 "--hidden=7100" "32" "mxfp4_blockwise" --
                 ${MOE_EP_CLI} bench --hidden 7100 --dispatch-dtype fp4 --combine-dtype bf16)
moe_ep_cli_error(hidden_7100_int8_e3m4 2 "--hidden=7100" "32" "int8_e3m4_blockwise" "(combine)" --
                 ${MOE_EP_CLI} bench --hidden 7100 --dispatch-dtype bf16 --combine-dtype int8_e3m4)
moe_ep_cli_error(hidden_2880_fp4_fp8 2 "--hidden=2880" "128" "(combine)" --
                 ${MOE_EP_CLI} bench --hidden 2880 --dispatch-dtype fp4 --combine-dtype fp8)
moe_ep_cli_error(topk_zero 2 "--topk=0" -- ${MOE_EP_CLI} bench --topk 0)
moe_ep_cli_error(topk_above_experts 2 "--topk=13" "12" --
                 ${MOE_EP_CLI} bench --ranks 3 --experts 12 --topk 13)
moe_ep_cli_error(experts_not_divisible 2 "--experts=10" "4" --
                 ${MOE_EP_CLI} bench --experts 10 --ranks 4)
moe_ep_cli_error(tokens_above_max 2 "--tokens=300" "256" --
                 ${MOE_EP_CLI} bench --tokens 300 --max-tokens 256)
moe_ep_cli_error(dispatch_dtype_unknown 2 "--dispatch-dtype=fp16" "bf16|fp8|fp4" --
                 ${MOE_EP_CLI} bench --dispatch-dtype fp16)
moe_ep_cli_error(combine_dtype_unknown 2 "--combine-dtype=fp4" "fp8_direct_cast" "int8_e3m4" --
                 ${MOE_EP_CLI} bench --combine-dtype fp4)
moe_ep_cli_error(dispatch_dtype_list_unknown 2 "--dispatch-dtype=bf16,fp16" "'fp16'" "bf16|fp8|fp4"
                 -- ${MOE_EP_CLI} bench --dispatch-dtype bf16,fp16)
moe_ep_cli_error(combine_dtype_list_twice 2 "--combine-dtype=fp8,float8_blockwise"
                 "'float8_blockwise' names a dtype listed before it" --
                 ${MOE_EP_CLI} bench --combine-dtype fp8,float8_blockwise)
moe_ep_cli_error(combine_dtype_list_all 2 "--combine-dtype=bf16,all" "'all' stands alone" --
                 ${MOE_EP_CLI} bench --combine-dtype bf16,all)
moe_ep_cli_error(dispatch_dtype_list_empty_item 2 "--dispatch-dtype=bf16,," "''" --
                 ${MOE_EP_CLI} bench --dispatch-dtype bf16,,)
moe_ep_cli_error(ranks_zero 2 "--ranks=0" -- ${MOE_EP_CLI} bench --ranks 0)
moe_ep_cli_error(hidden_not_integer 2 "--hidden=abc" "integer" --
                 ${MOE_EP_CLI} bench --hidden abc)
moe_ep_cli_error(masked_fraction_range 2 "--masked-fraction=2" "[0, 1]" --
                 ${MOE_EP_CLI} bench --masked-fraction 2)
moe_ep_cli_error(backend_unknown 2 "--backend=gpu" "auto|cpu|cuda" --
                 ${MOE_EP_CLI} bench --backend gpu)
# --baseline nccl times NCCL on the GPUs: with the cpu backend it is a bad argument.
moe_ep_cli_error(baseline_nccl_cpu 2 "--baseline=nccl" "--backend cuda" "cpu" --
                 ${MOE_EP_CLI} bench --baseline nccl --backend cpu)
moe_ep_cli_error(baseline_unknown 2 "--baseline=bogus" "none|nccl" --
                 ${MOE_EP_CLI} bench --baseline bogus)
moe_ep_cli_error(mode_unknown 2 "--mode=prefill" "normal|decode" --
                 ${MOE_EP_CLI} bench --mode prefill)
moe_ep_cli_error(decode_graph_unknown 2 "--decode-graph=step" "leg|round" --
                 ${MOE_EP_CLI} bench --mode decode --decode-graph step)
moe_ep_cli_error(decode_graph_normal_mode 2 "--decode-graph=round" "--mode decode" --
                 ${MOE_EP_CLI} bench --backend cpu --decode-graph round)
moe_ep_cli_error(round_us_decode_mode 2 "--round-us=on" "--decode-graph round" --
                 ${MOE_EP_CLI} bench --backend cpu --mode decode --round-us)
# The NCCL baseline times normal mode's legs: with --mode decode it is a bad argument, whatever
# the backend.
moe_ep_cli_error(decode_baseline_nccl 2 "--baseline=nccl" "--mode decode" "none" --
                 ${MOE_EP_CLI} bench --mode decode --baseline nccl --backend cpu)
moe_ep_cli_error(decode_tokens_above_max 2 "--tokens=64" "32" --
                 ${MOE_EP_CLI} bench --mode decode --tokens 64 --max-tokens 32)
# --tokens LIST: every value is checked, and the message names the bad one.
moe_ep_cli_error(tokens_negative 2 "--tokens=-1" ">= 0" -- ${MOE_EP_CLI} bench --tokens=-1)
moe_ep_cli_error(tokens_list_negative 2 "--tokens=-1" ">= 0" --
                 ${MOE_EP_CLI} bench --mode decode --tokens 4,-1)
moe_ep_cli_error(tokens_list_not_integer 2 "--tokens=4,x" "'x' is not an integer" --
                 ${MOE_EP_CLI} bench --mode decode --tokens 4,x)
moe_ep_cli_error(tokens_list_empty_item 2 "--tokens=4,,8" "'' is not an integer" --
                 ${MOE_EP_CLI} bench --tokens 4,,8)
moe_ep_cli_error(tokens_list_above_max 2 "--tokens=8" "--max-tokens=4" --
                 ${MOE_EP_CLI} bench --mode decode --tokens 1,8 --max-tokens 4)
moe_ep_cli_error(tokens_above_max_4 2 "--tokens=8" "--max-tokens=4" --
                 ${MOE_EP_CLI} bench --mode decode --tokens 8 --max-tokens 4)
# --ranks-per-node: 0 < L <= --ranks, dividing it.
moe_ep_cli_error(ranks_per_node_not_dividing 2 "--ranks-per-node=3" "divide --ranks=4" --
                 ${MOE_EP_CLI} bench --backend cpu --ranks 4 --ranks-per-node 3)
moe_ep_cli_error(ranks_per_node_negative 2 "--ranks-per-node=-1" ">= 1" --
                 ${MOE_EP_CLI} bench --backend cpu --ranks 4 --ranks-per-node=-1)
moe_ep_cli_error(ranks_per_node_zero 2 "--ranks-per-node=0" ">= 1" --
                 ${MOE_EP_CLI} bench --backend cpu --ranks 4 --ranks-per-node 0)
moe_ep_cli_error(ranks_per_node_above_ranks 2 "--ranks-per-node=8" "<= --ranks=4" --
                 ${MOE_EP_CLI} bench --backend cpu --ranks 4 --ranks-per-node 8)
moe_ep_cli_error(ranks_per_node_not_integer 2 "--ranks-per-node=two" "integer" --
                 ${MOE_EP_CLI} bench --ranks-per-node two)
# --copy-engine: the CUDA backend's path (normal mode, one node); on the CPU backend a bad argument.
moe_ep_cli_error(copy_engine_cpu 2 "--copy-engine=on" "cuda backend" --
                 ${MOE_EP_CLI} bench --backend cpu --copy-engine)
moe_ep_cli_error(unknown_option 2 "--bogus" -- ${MOE_EP_CLI} bench --bogus)
moe_ep_cli_error(no_command 2 "subcommand" -- ${MOE_EP_CLI})
moe_ep_cli_error(config_env_bogus 2 "MOE_EP_DISPATCH_DTYPE" "bogus" --
                 env MOE_EP_DISPATCH_DTYPE=bogus ${MOE_EP_CLI} config)
moe_ep_cli_error(config_deprecated_both 2 "MOE_EP_FP8_DISP" "MOE_EP_FP4_DISP" --
                 env MOE_EP_FP8_DISP=1 MOE_EP_FP4_DISP=1 ${MOE_EP_CLI} config)
moe_ep_cli_error(bench_env_bogus 2 "MOE_EP_COMBINE_DTYPE" "nope" --
                 env MOE_EP_COMBINE_DTYPE=nope ${MOE_EP_CLI} bench)
# The format study (tools/format_study), quick mode: it runs and prints its seed and the shipped
# int8/e3m4 row.
if(TARGET moe-ep-format-study)
  moe_ep_cli_ok(format_study_quick "seed 1, quick" "int8/e3m4 blockwise (shipped" --
                $<TARGET_FILE:moe-ep-format-study> --quick)
endif()
if(NOT MOE_EP_HAVE_CUDA)
  moe_ep_cli_error(backend_cuda_not_built 2 "--backend=cuda" "without CUDA" --
                   ${MOE_EP_CLI} bench --backend cuda)
endif()
# moe-ep-link-floor (built with CUDA): bad arguments are refused before any GPU is touched, so
# these run without one.
if(TARGET moe-ep-link-floor)
  set(MOE_EP_LINK_FLOOR $<TARGET_FILE:moe-ep-link-floor>)
  moe_ep_cli_error(link_floor_sms_not_integer 2 "--sms=8,x" "'x' is not an integer" --
                   ${MOE_EP_LINK_FLOOR} --sms 8,x)
  moe_ep_cli_error(link_floor_sms_zero 2 "--sms=0" "outside [1, 1024]" --
                   ${MOE_EP_LINK_FLOOR} --sms 0)
  moe_ep_cli_error(link_floor_same_gpu 2 "--gpus=1,1" "two different devices" --
                   ${MOE_EP_LINK_FLOOR} --gpus 1,1)
  moe_ep_cli_error(link_floor_three_gpus 2 "--gpus=0,1,2" "or one for copies inside it" --
                   ${MOE_EP_LINK_FLOOR} --gpus 0,1,2)
  moe_ep_cli_error(link_floor_mib 2 "--mib=0" "outside [1, 16384]" --
                   ${MOE_EP_LINK_FLOOR} --mib 0)
  moe_ep_cli_error(link_floor_mib_list 2 "--mib=1,2" "takes one value" --
                   ${MOE_EP_LINK_FLOOR} --mib 1,2)
  moe_ep_cli_error(link_floor_unknown 2 "--bogus" "unknown option" --
                   ${MOE_EP_LINK_FLOOR} --bogus 1)
endif()
# moe-ep-latency-floor (built with CUDA): the same for its arguments; on a GPU (label gpu) a short
# run must pass the tool's own checks (each chase ends on its predicted slot, the signalling
# blocks on two SMs within a second) and print its page, boundary and last rows.
if(TARGET moe-ep-latency-floor)
  set(MOE_EP_LATENCY_FLOOR $<TARGET_FILE:moe-ep-latency-floor>)
  moe_ep_cli_error(latency_floor_reps_zero 2 "--reps=0" "outside [1, 1000]" --
                   ${MOE_EP_LATENCY_FLOOR} --reps 0)
  moe_ep_cli_error(latency_floor_chain_short 2 "--chain=8" "outside [16, 65536]" --
                   ${MOE_EP_LATENCY_FLOOR} --chain 8)
  moe_ep_cli_error(latency_floor_gpu_not_integer 2 "--gpu=x" "'x' is not an integer" --
                   ${MOE_EP_LATENCY_FLOOR} --gpu x)
  moe_ep_cli_error(latency_floor_unknown 2 "--bogus" "unknown option" --
                   ${MOE_EP_LATENCY_FLOOR} --bogus 1)
  moe_ep_cli_error(latency_floor_reps_list 2 "--reps=2,3" "takes one value" --
                   ${MOE_EP_LATENCY_FLOOR} --reps 2,3)
  add_test(NAME latency_floor_runs
           COMMAND bash ${MOE_EP_CLI_DIR}/expect_output.sh "# moe-ep-latency-floor: GPU 0"
                   "2 MiB page (64 pages)" "kernel boundary in a CUDA graph, programmatic launch"
                   "grids of 264 x 512, graph (a round)" --
                   ${MOE_EP_LATENCY_FLOOR} --reps 3 --chain 64)
  # Without a usable GPU (this machine's CI) the tool stops at its first CUDA call: skipped.
  set_tests_properties(latency_floor_runs PROPERTIES LABELS gpu TIMEOUT 60 SKIP_REGULAR_EXPRESSION
                       "cudaErrorNoDevice|cudaErrorInsufficientDriver")
endif()

# scripts/multi-gpu-bench --dry-run lists its steps without a GPU (and writes nothing).
add_test(NAME scripts_multi_gpu_bench_dry_run
         COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/multi-gpu-bench --dry-run)
set_tests_properties(scripts_multi_gpu_bench_dry_run PROPERTIES LABELS cpu
                     PASS_REGULAR_EXPRESSION "ctest-multi: ctest --test-dir [^ ]+ --output-on-failure")
# --steps runs only the named steps (here: only decode is listed), and names an unknown one.
add_test(NAME scripts_multi_gpu_bench_steps
         COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/multi-gpu-bench --dry-run --steps decode)
set_tests_properties(scripts_multi_gpu_bench_steps PROPERTIES LABELS cpu
                     PASS_REGULAR_EXPRESSION "^decode: [^\n]*--mode decode[^\n]*\n$")
moe_ep_cli_error(multi_gpu_bench_unknown_step 1 "--steps: unknown step 'bogus'" "ctest-multi" --
                 bash ${PROJECT_SOURCE_DIR}/scripts/multi-gpu-bench --dry-run --steps decode,bogus)
