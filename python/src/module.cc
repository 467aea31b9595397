// moe_ep._C: the compiled half of the Python package. It exposes the C++ API with its own names
// and string values (dtype enums, block sizes, scale_dim, dtype resolution, the error family,
// communicators including the single-GPU test world, ops with their decode-mode calls and their
// receive parts (overlap hooks), their rejections and the op cache) and nothing else: the
// Python half (python/moe_ep) only turns torch tensors, numpy arrays and process groups into the
// arguments below. An argument this layer cannot import is a rejected call (Op::reject), never
// an error of this rank alone.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "errors.h"
#include "formats/row_format.h"
#include "moe_ep/cuda.h"
#include "moe_ep/moe_ep.h"
#include "tensors.h"

namespace py = pybind11;

namespace moe_ep::python {
namespace {

// ---- dtypes and configuration ---------------------------------------------------------------

template <typename Enum, size_t N>
py::list enum_members(const Enum (&all)[N], const char* (*name)(Enum)) {
  py::list out;
  for (Enum e : all) out.append(py::make_tuple(name(e), to_string(e)));
  return out;
}

const char* weight_short_name(WeightDtype w) {
  switch (w) {
    case WeightDtype::bf16: return "bf16";
    case WeightDtype::fp8: return "fp8";
    case WeightDtype::fp4: return "fp4";
  }
  return "?";
}

// scale_dim for a dispatch or combine dtype named by its short name or string value.
int64_t scale_dim_of(const std::string& dtype, int64_t hidden) {
  if (hidden < 0) throw InvalidArgument("hidden=" + std::to_string(hidden) + " must be >= 0");
  int block = 0;
  try {
    block = block_size(parse_dispatch_dtype(dtype, "dtype"));
  } catch (const InvalidArgument&) {
    try {
      block = block_size(parse_combine_dtype(dtype, "dtype"));
    } catch (const InvalidArgument&) {
      throw InvalidArgument("dtype=\"" + dtype + "\" is not a wire dtype; valid: " +
                            valid_dispatch_values() + "|" + valid_combine_values());
    }
  }
  if (block != 0 && hidden % block != 0) {
    throw InvalidArgument("hidden=" + std::to_string(hidden) + " is not a multiple of the " +
                          dtype + " block size " + std::to_string(block));
  }
  return block == 0 ? 0 : hidden / block;
}

py::dict resolve(const std::string& weights, const std::string& dispatch,
                 const std::string& combine, const std::optional<EnvMap>& env) {
  const WeightDtype w = parse_weight_dtype(weights, "weight_dtype");
  const auto d = parse_dispatch_choice(dispatch, "dispatch_dtype");
  const auto c = parse_combine_choice(combine, "combine_dtype");
  const DtypeResolution r =
      env ? resolve_dtypes(d, c, w, Knobs::from(*env)) : resolve_dtypes(d, c, w);
  py::dict out;
  out["dispatch"] = short_name(r.dispatch);
  out["combine"] = short_name(r.combine);
  out["dispatch_source"] = to_string(r.dispatch_source);
  out["combine_source"] = to_string(r.combine_source);
  out["dispatch_origin"] = r.dispatch_origin;
  out["combine_origin"] = r.combine_origin;
  out["warnings"] = r.warnings;
  return out;
}

py::dict config_dict(const OpConfig& c) {
  py::dict out;
  out["num_experts"] = c.num_experts;
  out["hidden"] = c.hidden;
  out["top_k"] = c.topk;
  out["max_tokens_per_rank"] = c.max_tokens_per_rank;
  out["dispatch_dtype"] = short_name(c.dispatch_dtype);
  out["combine_dtype"] = short_name(c.combine_dtype);
  out["instance_id"] = c.instance_id;
  out["num_sms"] = c.num_sms;
  out["low_latency"] = c.low_latency;
  out["ranks_per_node"] = c.ranks_per_node;
  out["copy_engine"] = c.copy_engine;
  out["column_major_scales"] = c.column_major_scales;
  return out;
}

// OpMemory as Python sees it (moe_ep.op_memory, Op.memory).
py::dict memory_dict(const OpMemory& m) {
  py::dict out;
  out["peer_bytes"] = m.peer_bytes;
  out["private_bytes"] = m.private_bytes;
  out["total"] = m.total();
  return out;
}

// ---- op calls -------------------------------------------------------------------------------
//
// Every argument error of this layer is collective, like the op's own checks: a rank whose
// arguments cannot even be imported (wrong dtype, layout, rank, device type, not a tensor) still
// joins the call through Op::reject, so every rank's call fails with its reason and nothing
// moves; nothing is consumed either (ImportScope commits only after the call took effect).

void* as_stream(uintptr_t stream) { return reinterpret_cast<void*>(stream); }

CallKind parse_call_kind(const std::string& kind) {
  for (CallKind k : {CallKind::kDispatch, CallKind::kCombine, CallKind::kLowLatencyDispatch,
                     CallKind::kLowLatencyCombine}) {
    if (kind == to_string(k)) return k;
  }
  throw InvalidArgument("kind=\"" + kind +
                        "\" is not a call kind; valid: "
                        "dispatch|combine|low_latency_dispatch|low_latency_combine");
}

// Joins this rank's next call of `kind` with a rejected verdict; always throws (the rejection,
// or what the op reports instead: calls out of step, a poisoned op).
[[noreturn]] void reject_call(Op& op, CallKind kind, const std::string& reason, void* stream) {
  {
    py::gil_scoped_release release;  // collective: the other ranks may be threads of ours
    op.reject(kind, reason, stream);
  }
  throw Internal(std::string(to_string(kind)) + ": the op accepted a call this rank rejected");
}

constexpr const char* kTakesBf16 = "bfloat16 (numpy: its uint16 bit patterns)";

// The arguments of dispatch and low_latency_dispatch (the same DispatchArgs), imported into
// `scope`; a refusal is the rejection of this rank's call of `kind`.
DispatchArgs import_dispatch_args(Op& op, CallKind kind, ImportScope& scope, py::handle x,
                                  py::handle topk_idx, py::handle topk_weights, py::handle x_scales,
                                  uintptr_t stream) {
  // Pre-quantized x crosses DLPack as bytes; say which wire types those bytes are.
  const formats::RowFormat wire = formats::row_format(op.config().dispatch_dtype, 0);
  const auto byte_type = [](ScalarType t) { return element_size(t) == 1 ? t : ScalarType::kUInt8; };
  DispatchArgs args;
  args.stream = as_stream(stream);
  try {
    args.x = scope.import(x, {"x",
                              "bfloat16 (numpy: its uint16 bit patterns) or, pre-quantized, "
                              "one-byte wire codes with x_scales",
                              true, byte_type(wire.payload_type)});
    if (!x_scales.is_none()) {
      args.x_scales =
          scope.import(x_scales, {"x_scales", "float32 (fp8) or one-byte e8m0 (mxfp4) scales",
                                  false, byte_type(wire.scale_type)});
    }
    args.topk_idx =
        scope.import(topk_idx, {"topk_idx", "int32 (torch and numpy int64 are converted by moe_ep)",
                                false, std::nullopt, false});
    args.topk_weights =
        scope.import(topk_weights, {"topk_weights", "float32", false, std::nullopt, false});
  } catch (const std::exception& e) {
    reject_call(op, kind, e.what(), args.stream);
  }
  return args;
}

// An output view for Python (None where the view is undefined, e.g. bf16 scales); the buffer
// keeps the op, and so its memory, alive.
py::object exported(const TensorView& v, const std::shared_ptr<Op>& op, bool raw_bits) {
  const std::shared_ptr<const void> keep = op;
  return v.defined() ? py::cast(ExportedBuffer(v, keep, raw_bits)) : py::none();
}

py::tuple dispatch(const std::shared_ptr<Op>& op, py::object x, py::object topk_idx,
                   py::object topk_weights, py::object x_scales, uintptr_t stream, bool raw_bits) {
  ImportScope scope;
  const DispatchArgs args = import_dispatch_args(*op, CallKind::kDispatch, scope, x, topk_idx,
                                                 topk_weights, x_scales, stream);
  DispatchResult r;
  {
    py::gil_scoped_release release;
    r = op->dispatch(args);
  }
  scope.commit();
  py::dict recv;
  auto put = [&](const char* key, const TensorView& v) { recv[key] = exported(v, op, raw_bits); };
  put("recv_x", r.recv_x);
  put("recv_x_scales", r.recv_x_scales);
  put("recv_topk_idx", r.recv_topk_idx);
  put("recv_topk_weights", r.recv_topk_weights);
  put("recv_src_rank", r.recv_src_rank);
  put("recv_src_token", r.recv_src_token);
  put("recv_count_per_local_expert", r.recv_count_per_local_expert);
  recv["num_recv"] = r.num_recv;
  return py::make_tuple(recv, r.handle);
}

void combine(const std::shared_ptr<Op>& op, py::object handle, py::object y, py::object out,
             uintptr_t stream) {
  ImportScope scope;
  Handle h;
  TensorView y_view, out_view;
  try {
    if (!py::isinstance<Handle>(handle)) {
      throw InvalidArgument("handle: expected the moe_ep.Handle of a dispatch, got " +
                            std::string(py::str(py::type::handle_of(handle).attr("__name__"))));
    }
    h = handle.cast<Handle>();
    y_view = scope.import(y, {"y", kTakesBf16, true, std::nullopt, false});
    out_view = scope.import(out, {"out", kTakesBf16, true, std::nullopt, true});
  } catch (const std::exception& e) {
    reject_call(*op, CallKind::kCombine, e.what(), as_stream(stream));
  }
  {
    py::gil_scoped_release release;
    op->combine(h, y_view, out_view, as_stream(stream));
  }
  scope.commit();
}

// Decode mode (docs/decode-mode.md): the arguments of dispatch; outputs of fixed shapes, 3-D
// slabs among them. With return_recv_hook the views are filled by low_latency_dispatch_recv.
py::tuple low_latency_dispatch(const std::shared_ptr<Op>& op, py::object x, py::object topk_idx,
                               py::object topk_weights, py::object x_scales, uintptr_t stream,
                               bool raw_bits, bool return_recv_hook) {
  ImportScope scope;
  const LowLatencyDispatchArgs args(
      import_dispatch_args(*op, CallKind::kLowLatencyDispatch, scope, x, topk_idx, topk_weights,
                           x_scales, stream),
      return_recv_hook);
  LowLatencyDispatchResult r;
  {
    py::gil_scoped_release release;
    r = op->low_latency_dispatch(args);
  }
  scope.commit();
  py::dict recv;
  auto put = [&](const char* key, const TensorView& v) { recv[key] = exported(v, op, raw_bits); };
  put("recv_x", r.recv_x);
  put("recv_x_scales", r.recv_x_scales);
  put("recv_count", r.recv_count);
  put("recv_src_rank", r.recv_src_rank);
  put("recv_src_token", r.recv_src_token);
  put("recv_src_slot", r.recv_src_slot);
  return py::make_tuple(recv, r.handle);
}

// With return_recv_hook only the partial sums are sent; low_latency_combine_recv writes `out`,
// which the Python layer keeps alive until then.
void low_latency_combine(const std::shared_ptr<Op>& op, py::object handle, py::object y,
                         py::object out, uintptr_t stream, bool return_recv_hook) {
  ImportScope scope;
  LowLatencyHandle h;
  TensorView y_view, out_view;
  try {
    if (!py::isinstance<LowLatencyHandle>(handle)) {
      throw InvalidArgument(
          "handle: expected the moe_ep.LowLatencyHandle of a low_latency_dispatch, got " +
          std::string(py::str(py::type::handle_of(handle).attr("__name__"))));
    }
    h = handle.cast<LowLatencyHandle>();
    y_view = scope.import(y, {"y", kTakesBf16, true, std::nullopt, false, 3});
    out_view = scope.import(out, {"out", kTakesBf16, true, std::nullopt, true});
  } catch (const std::exception& e) {
    reject_call(*op, CallKind::kLowLatencyCombine, e.what(), as_stream(stream));
  }
  {
    py::gil_scoped_release release;
    op->low_latency_combine(y_view, h, out_view, as_stream(stream), return_recv_hook);
  }
  scope.commit();
}

// The receive part of a decode call made with return_recv_hook (overlap hooks). It has no step
// of its own: a handle that is not a LowLatencyHandle is refused on this rank alone, as the op
// refuses a receive call that matches no pending receive (every rank makes the same mistake).
void low_latency_recv(const std::shared_ptr<Op>& op, CallKind kind, py::object handle,
                      uintptr_t stream) {
  const bool dispatch = kind == CallKind::kLowLatencyDispatch;
  const char* call = dispatch ? "low_latency_dispatch_recv" : "low_latency_combine_recv";
  if (!py::isinstance<LowLatencyHandle>(handle)) {
    throw InvalidArgument(std::string(call) +
                          ": handle: expected the moe_ep.LowLatencyHandle of the call made with "
                          "return_recv_hook=True, got " +
                          std::string(py::str(py::type::handle_of(handle).attr("__name__"))));
  }
  const LowLatencyHandle h = handle.cast<LowLatencyHandle>();
  py::gil_scoped_release release;  // collective: the other ranks may be threads of ours
  if (dispatch) {
    op->low_latency_dispatch_recv(h, as_stream(stream));
  } else {
    op->low_latency_combine_recv(h, as_stream(stream));
  }
}

// The reference Python holds to an op (its wrapper, and every output buffer through it). When
// the last one goes, the op is destroyed without the GIL: a CUDA op's destructor waits for its
// latest kernels, which in the single-GPU test world may wait for another rank's kernels that
// the other rank's thread can only launch once it has the GIL.
std::shared_ptr<Op> released_without_gil(std::shared_ptr<Op> op) {
  Op* raw = op.get();
  return std::shared_ptr<Op>(raw, [keep = std::move(op)](Op*) mutable {
    if (Py_IsInitialized() && PyGILState_Check()) {
      py::gil_scoped_release release;
      keep.reset();
    } else {
      keep.reset();
    }
  });
}

OpConfig make_config(int num_experts, int hidden, int top_k, int max_tokens_per_rank,
                     const std::string& dispatch, const std::string& combine, int instance_id,
                     int num_sms, bool low_latency, int ranks_per_node, bool copy_engine,
                     bool column_major_scales) {
  OpConfig c;
  c.num_experts = num_experts;
  c.hidden = hidden;
  c.topk = top_k;
  c.max_tokens_per_rank = max_tokens_per_rank;
  c.dispatch_dtype = parse_dispatch_dtype(dispatch, "dispatch_dtype");
  c.combine_dtype = parse_combine_dtype(combine, "combine_dtype");
  c.instance_id = instance_id;
  c.num_sms = num_sms;
  c.low_latency = low_latency;
  c.ranks_per_node = ranks_per_node;
  c.copy_engine = copy_engine;
  c.column_major_scales = column_major_scales;
  return c;
}

}  // namespace
}  // namespace moe_ep::python

PYBIND11_MODULE(_C, m) {
  using namespace moe_ep;
  using namespace moe_ep::python;
  m.doc() = "moe-ep compiled module; use the moe_ep package, not this module directly.";
  register_errors(m);

  m.attr("FP8_BLOCK_SIZE") = kFp8BlockSize;
  m.attr("MXFP4_BLOCK_SIZE") = kMxfp4BlockSize;
  m.def("dispatch_dtype_members", [] {
    return enum_members(kAllDispatchDtypes,
                        static_cast<const char* (*)(DispatchDtype)>(&short_name));
  });
  m.def("combine_dtype_members", [] {
    return enum_members(kAllCombineDtypes, static_cast<const char* (*)(CombineDtype)>(&short_name));
  });
  m.def("weight_dtype_members", [] {
    const WeightDtype all[] = {WeightDtype::bf16, WeightDtype::fp8, WeightDtype::fp4};
    return enum_members(all, &weight_short_name);
  });
  m.def("scale_dim", &scale_dim_of, py::arg("dtype"), py::arg("hidden"));
  m.def("resolve_dtypes", &resolve, py::arg("weight_dtype"), py::arg("dispatch_dtype"),
        py::arg("combine_dtype"), py::arg("env") = py::none());
  m.def("process_env", [] { return Knobs::process_env(); });
  m.def("cuda_backend_built", &cuda_backend_built);
  m.def("cuda_device_count", &cuda_device_count);
  m.def("nccl_unique_id", [] { return py::bytes(nccl_unique_id()); });

  py::class_<Communicator, std::shared_ptr<Communicator>>(m, "Communicator")
      .def_property_readonly("rank", &Communicator::rank)
      .def_property_readonly("size", &Communicator::size)
      .def_property_readonly("backend",
                             [](const Communicator& c) { return to_string(c.backend()); })
      .def_property_readonly("group_id", &Communicator::group_id)
      .def("__repr__", [](const Communicator& c) {
        return "<moe_ep.Communicator " + std::string(to_string(c.backend())) + " rank " +
               std::to_string(c.rank()) + " of " + std::to_string(c.size()) + ">";
      });
  m.def(
      "make_nccl_communicator",
      [](py::bytes unique_id, int rank, int world_size, int device) {
        std::string id = unique_id;
        py::gil_scoped_release release;  // collective: the other ranks may be threads of ours
        return make_nccl_communicator(id, rank, world_size, device);
      },
      py::arg("unique_id"), py::arg("rank"), py::arg("world_size"), py::arg("device"));

  m.def(
      "reject_create",
      [](const std::shared_ptr<Communicator>& comm, const std::string& reason) {
        if (!comm) throw InvalidArgument("reject_create: comm is None");
        py::gil_scoped_release release;  // the other ranks may be threads of ours
        reject_create(comm, reason);
      },
      py::arg("comm"), py::arg("reason"),
      "Tells the ranks of comm that are creating an op that this rank rejected its creation: "
      "they fail at once with InvalidArgument naming this rank and reason.");
  m.def(
      "make_single_gpu_world",
      [](int world_size, int device, double timeout_s, int domain_size) {
        py::gil_scoped_release release;
        return make_single_gpu_world(world_size, device, timeout_s, domain_size);
      },
      py::arg("world_size"), py::arg("device") = 0, py::arg("timeout_s") = 0.0,
      py::arg("domain_size") = 0);

  py::class_<CpuWorld, std::shared_ptr<CpuWorld>>(m, "CpuWorld")
      .def(py::init([](int world_size, double timeout_s) {
             return CpuWorld::create(world_size, timeout_s);
           }),
           py::arg("world_size"), py::arg("timeout_s") = 0.0)
      .def_property_readonly("size", &CpuWorld::size)
      .def("communicator", &CpuWorld::communicator, py::arg("rank"));

  py::class_<Handle>(m, "Handle")
      .def_readonly("op_uid", &Handle::op_uid)
      .def_readonly("call_seq", &Handle::call_seq)
      .def_readonly("num_tokens", &Handle::num_tokens)
      .def_readonly("num_recv", &Handle::num_recv)
      .def("__repr__", [](const Handle& h) {
        return "<moe_ep.Handle op " + std::to_string(h.op_uid) + " call " +
               std::to_string(h.call_seq) + ", " + std::to_string(h.num_tokens) + " tokens, " +
               std::to_string(h.num_recv) + " received>";
      });

  py::class_<LowLatencyHandle>(m, "LowLatencyHandle")
      .def_readonly("op_uid", &LowLatencyHandle::op_uid)
      .def_readonly("call_seq", &LowLatencyHandle::call_seq)
      .def_readonly("num_tokens", &LowLatencyHandle::num_tokens)
      .def("__repr__", [](const LowLatencyHandle& h) {
        return "<moe_ep.LowLatencyHandle op " + std::to_string(h.op_uid) + " call " +
               std::to_string(h.call_seq) + ", " + std::to_string(h.num_tokens) + " tokens>";
      });

  py::class_<ExportedBuffer>(m, "Buffer")
      .def(
          "__dlpack__",
          [](const ExportedBuffer& b, py::object /*stream*/, py::object /*max_version*/,
             py::object /*dl_device*/, py::object copy) {
            if (!copy.is_none() && copy.cast<bool>()) {
              throw py::buffer_error("moe_ep.Buffer: copy=True is not supported; copy after");
            }
            return b.dlpack();
          },
          py::arg("stream") = py::none(), py::arg("max_version") = py::none(),
          py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack_device__", &ExportedBuffer::dlpack_device)
      .def_property_readonly("__array_interface__", &ExportedBuffer::array_interface)
      .def_property_readonly("dtype",
                             [](const ExportedBuffer& b) { return to_string(b.view().dtype); })
      .def("__repr__",
           [](const ExportedBuffer& b) { return "<moe_ep.Buffer " + b.view().describe() + ">"; });

  py::class_<Op, std::shared_ptr<Op>>(m, "Op")
      .def_property_readonly("config", [](const Op& op) { return config_dict(op.config()); })
      .def_property_readonly("rank", &Op::rank)
      .def_property_readonly("world_size", &Op::world_size)
      .def_property_readonly("backend", [](const Op& op) { return to_string(op.backend()); })
      .def_property_readonly("uid", &Op::uid)
      .def_property_readonly("low_latency", [](const Op& op) { return op.config().low_latency; })
      .def_property_readonly("copy_engine", [](const Op& op) { return op.config().copy_engine; })
      .def_property_readonly("captured", &Op::captured)
      .def("memory", [](const Op& op) { return memory_dict(op.memory()); })
      .def("dispatch", &dispatch, py::arg("x"), py::arg("topk_idx"), py::arg("topk_weights"),
           py::arg("x_scales") = py::none(), py::arg("stream") = 0, py::arg("raw_bits") = false)
      .def("combine", &combine, py::arg("handle"), py::arg("y"), py::arg("out"),
           py::arg("stream") = 0)
      .def("low_latency_dispatch", &low_latency_dispatch, py::arg("x"), py::arg("topk_idx"),
           py::arg("topk_weights"), py::arg("x_scales") = py::none(), py::arg("stream") = 0,
           py::arg("raw_bits") = false, py::arg("return_recv_hook") = false)
      .def("low_latency_combine", &low_latency_combine, py::arg("handle"), py::arg("y"),
           py::arg("out"), py::arg("stream") = 0, py::arg("return_recv_hook") = false)
      .def(
          "low_latency_dispatch_recv",
          [](const std::shared_ptr<Op>& op, py::object handle, uintptr_t stream) {
            low_latency_recv(op, CallKind::kLowLatencyDispatch, handle, stream);
          },
          py::arg("handle"), py::arg("stream") = 0)
      .def(
          "low_latency_combine_recv",
          [](const std::shared_ptr<Op>& op, py::object handle, uintptr_t stream) {
            low_latency_recv(op, CallKind::kLowLatencyCombine, handle, stream);
          },
          py::arg("handle"), py::arg("stream") = 0)
      .def(
          "reject",
          [](Op& op, const std::string& kind, const std::string& reason, uintptr_t stream) {
            reject_call(op, parse_call_kind(kind), reason, as_stream(stream));
          },
          py::arg("kind"), py::arg("reason"), py::arg("stream") = 0,
          "Joins this rank's next call of kind (\"dispatch\" | \"combine\" | "
          "\"low_latency_dispatch\" | \"low_latency_combine\") with a rejected verdict: every "
          "rank's call fails with InvalidArgument naming this rank and reason; raises here too. "
          "The op stays usable.")
      .def(
          "synchronize",
          [](Op& op, uintptr_t stream) {
            py::gil_scoped_release release;
            op.synchronize(reinterpret_cast<void*>(stream));
          },
          py::arg("stream") = 0);

  m.def(
      "op_memory",
      [](const std::shared_ptr<Communicator>& comm, int num_experts, int hidden, int top_k,
         int max_tokens_per_rank, const std::string& dispatch, const std::string& combine,
         int instance_id, int num_sms, bool low_latency, int ranks_per_node, bool copy_engine,
         bool column_major_scales) {
        if (!comm) throw InvalidArgument("group is None; a communicator is required");
        const OpConfig config = make_config(num_experts, hidden, top_k, max_tokens_per_rank,
                                            dispatch, combine, instance_id, num_sms, low_latency,
                                            ranks_per_node, copy_engine, column_major_scales);
        return memory_dict(op_memory(comm, config));
      },
      py::arg("comm"), py::arg("num_experts"), py::arg("hidden"), py::arg("top_k"),
      py::arg("max_tokens_per_rank"), py::arg("dispatch_dtype"), py::arg("combine_dtype"),
      py::arg("instance_id"), py::arg("num_sms") = 0, py::arg("low_latency") = false,
      py::arg("ranks_per_node") = 0, py::arg("copy_engine") = false,
      py::arg("column_major_scales") = false,
      "What create_op would allocate on this rank (moe_ep::op_memory): a dict of peer_bytes, "
      "private_bytes and total.");

  py::class_<OpCache>(m, "OpCache")
      .def(py::init<size_t>(), py::arg("capacity") = 4)
      .def(
          "get",
          [](OpCache& cache, const std::shared_ptr<Communicator>& comm, int num_experts, int hidden,
             int top_k, int max_tokens_per_rank, const std::string& dispatch,
             const std::string& combine, int instance_id, int num_sms, bool low_latency,
             int ranks_per_node, bool copy_engine, bool column_major_scales) {
            if (!comm) throw InvalidArgument("group is None; a communicator is required");
            const OpConfig config = make_config(
                num_experts, hidden, top_k, max_tokens_per_rank, dispatch, combine, instance_id,
                num_sms, low_latency, ranks_per_node, copy_engine, column_major_scales);
            py::gil_scoped_release release;  // collective create: other ranks may be threads
            return released_without_gil(cache.get(comm, config));
          },
          py::arg("comm"), py::arg("num_experts"), py::arg("hidden"), py::arg("top_k"),
          py::arg("max_tokens_per_rank"), py::arg("dispatch_dtype"), py::arg("combine_dtype"),
          py::arg("instance_id"), py::arg("num_sms") = 0, py::arg("low_latency") = false,
          py::arg("ranks_per_node") = 0, py::arg("copy_engine") = false,
          py::arg("column_major_scales") = false)
      .def_property_readonly("size", &OpCache::size)
      .def_property_readonly("capacity", &OpCache::capacity)
      .def_property_readonly("eviction_log", &OpCache::eviction_log)
      .def_property_readonly("retained", &OpCache::retained)
      .def("clear", [](OpCache& cache) {
        py::gil_scoped_release release;
        cache.clear();
      });
}
