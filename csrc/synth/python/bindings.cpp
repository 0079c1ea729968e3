// pybind11 module autoccl._synth: thin bindings over autoccl_synth.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "autoccl/synth/synth.h"

namespace py = pybind11;
using namespace autoccl::synth;

namespace {

// Runs `work` (a synthesis, GIL released) on a thread of its own while this thread, every 50 ms, lets Python
// run its signal handlers: Ctrl-C (KeyboardInterrupt) sets `stop`, which the synthesis reads at each event, and
// is raised here once the synthesis has ended. In a thread other than Python's main one no handler runs and
// the synthesis runs to its end, as without this. `progress` (None: none) is called at each wake-up with
// (seconds since the start, deliveries made so far); an exception it raises stops the synthesis like Ctrl-C.
template <class Work>
void run_interruptible(std::atomic<bool>& stop, const std::atomic<std::uint64_t>& deliveries,
                       const py::object& progress, Work&& work) {
  const auto start = std::chrono::steady_clock::now();
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr failure;
  std::thread th([&] {
    try {
      work();
    } catch (...) {
      failure = std::current_exception();
    }
    std::lock_guard<std::mutex> lk(mu);
    done = true;
    cv.notify_all();
  });
  std::optional<py::error_already_set> signal;
  for (;;) {
    {
      py::gil_scoped_release rel;
      std::unique_lock<std::mutex> lk(mu);
      if (cv.wait_for(lk, std::chrono::milliseconds(50), [&] { return done; })) break;
    }
    if (signal) continue;
    if (PyErr_CheckSignals() != 0) {
      signal.emplace();  // takes the raised exception (KeyboardInterrupt, or the handler's own)
      stop.store(true, std::memory_order_relaxed);
      continue;
    }
    if (progress.is_none()) continue;
    try {
      progress(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
               deliveries.load(std::memory_order_relaxed));
    } catch (py::error_already_set& e) {
      signal.emplace(std::move(e));
      stop.store(true, std::memory_order_relaxed);
    }
  }
  {
    py::gil_scoped_release rel;
    th.join();
  }
  if (signal) throw std::move(*signal);
  if (failure) std::rethrow_exception(failure);
}

py::dict stats_dict(const SynthStats& st) {
  py::dict d;
  d["time_us"] = st.time_us;
  d["seed_times_us"] = st.seed_times;
  d["best_seed"] = st.best_seed;
  d["direct_pattern"] = st.direct_pattern;
  d["transfers"] = st.transfers;
  d["allgather_time_us"] = st.ag_time_us;
  d["reducescatter_time_us"] = st.rs_time_us;
  d["max_queue_entries"] = st.max_queue_entries;
  d["chunks_per_rank"] = st.chunks_per_rank;
  d["chunk_trials"] = st.chunk_trials;
  d["resent"] = st.resent;
  d["replaced"] = st.replaced;
  d["cancelled"] = st.cancelled;
  d["uncompacted_time_us"] = st.uncompacted_time_us;
  return d;
}

// The options `synthesize` and `synthesize_to_stream` share (their Python arguments).
SynthOptions synth_options(const std::string& coll, double bytes, int chunks, int seeds, int threads,
                           std::uint64_t base_seed, int root, double max_memory_bytes) {
  SynthOptions o;
  o.collective = collective_from_string(coll);
  o.bytes = bytes;
  o.chunks_per_rank = chunks;
  o.seeds = seeds;
  o.threads = threads;
  o.base_seed = base_seed;
  o.root = root;
  o.max_memory_bytes = max_memory_bytes;
  return o;
}

template <class T, class F>
py::array_t<T> column(const Schedule& s, F f) {
  py::array_t<T> a(static_cast<py::ssize_t>(s.transfers.size()));
  auto m = a.template mutable_unchecked<1>();
  for (size_t i = 0; i < s.transfers.size(); ++i) m(static_cast<py::ssize_t>(i)) = f(s.transfers[i]);
  return a;
}

}  // namespace

PYBIND11_MODULE(_synth, m) {
  m.doc() = "autoccl topology-aware collective synthesis (C++ core)";
  py::register_exception<Error>(m, "SynthError", PyExc_ValueError);
  // The library's limits, read by autoccl.synth (its MAX_BYTES and MAX_CHUNKS, which the command line checks before
  // it loads this module, are held equal to these by tests/synth/test_synth.py).
  m.attr("MAX_COLLECTIVE_BYTES") = kMaxCollectiveBytes;
  // chunks in one schedule (NPUs x chunks per NPU; per root for Broadcast/Reduce), as synthesis and baselines
  // enforce it
  m.attr("MAX_CHUNKS") = kMaxChunks;

  py::class_<Topology>(m, "Topology")
      .def(py::init<>())
      .def("add_node", [](Topology& t, const std::string& name, const std::string& kind) {
        return t.add_node(name, node_kind_from_string(kind));
      })
      .def("add_link", py::overload_cast<const std::string&, const std::string&, double, double>(&Topology::add_link),
           py::arg("src"), py::arg("dst"), py::arg("latency_us"), py::arg("bandwidth_gbps"))
      .def("fail_node", &Topology::fail_node)
      .def("fail_link", &Topology::fail_link)
      .def("finalize", &Topology::finalize)
      .def_property_readonly("finalized", &Topology::finalized)
      .def_property_readonly("num_npus", &Topology::num_npus)
      .def_property_readonly("num_nodes", &Topology::num_nodes)
      .def_property_readonly("num_links", &Topology::num_links)
      .def_property_readonly("num_channels", [](const Topology& t) { return t.channels().size(); })
      .def_property_readonly("nodes", [](const Topology& t) {
        py::list l;
        for (const auto& n : t.nodes()) l.append(py::make_tuple(n.name, to_string(n.kind)));
        return l;
      })
      .def_property_readonly("links", [](const Topology& t) {
        py::list l;
        for (const auto& k : t.links())
          l.append(py::make_tuple(t.node(k.src).name, t.node(k.dst).name, k.latency_us, k.bandwidth_gbps));
        return l;
      })
      .def_property_readonly("ranks", [](const Topology& t) {
        std::vector<std::string> r;
        for (int i = 0; i < t.num_npus(); ++i) r.push_back(t.node(t.npu_node(i)).name);
        return r;
      })
      .def_readwrite("dims", &Topology::dims)
      .def_readwrite("name", &Topology::name)
      .def_readwrite("layout", &Topology::layout)
      .def("in_bandwidth", &Topology::in_bandwidth)
      .def("out_bandwidth", &Topology::out_bandwidth)
      .def("transposed", &Topology::transposed);

  m.def("generate",
        [](const std::string& kind, const std::vector<int>& dims, double bandwidth, double latency,
           const std::vector<double>& dim_bandwidth, const std::vector<double>& dim_latency,
           const std::vector<std::string>& dim_types, std::optional<int> degree, double global_bandwidth,
           double global_latency, double nic_bandwidth, double nic_latency, std::optional<int> rails) {
          GenParams p;
          p.bandwidth_gbps = bandwidth;
          p.latency_us = latency;
          p.dim_bandwidth = dim_bandwidth;
          p.dim_latency = dim_latency;
          p.dim_types = dim_types;
          p.degree = degree;
          p.global_bandwidth_gbps = global_bandwidth;
          p.global_latency_us = global_latency;
          p.nic_bandwidth_gbps = nic_bandwidth;
          p.nic_latency_us = nic_latency;
          p.rails = rails;
          return generate(kind, dims, p);
        },
        py::arg("kind"), py::arg("dims"), py::arg("bandwidth") = 50.0, py::arg("latency") = 0.5,
        py::arg("dim_bandwidth") = std::vector<double>{}, py::arg("dim_latency") = std::vector<double>{},
        py::arg("dim_types") = std::vector<std::string>{}, py::arg("degree") = py::none(),
        py::arg("global_bandwidth") = 0.0,
        py::arg("global_latency") = 0.0, py::arg("nic_bandwidth") = 50.0, py::arg("nic_latency") = 2.0,
        py::arg("rails") = py::none());

  py::class_<Schedule>(m, "Schedule")
      .def(py::init<>())
      .def_property("collective", [](const Schedule& s) { return std::string(to_string(s.collective)); },
                    [](Schedule& s, const std::string& c) { s.collective = collective_from_string(c); })
      .def_readwrite("algorithm", &Schedule::algorithm)
      .def_readwrite("nranks", &Schedule::nranks)
      .def_readwrite("nchunks", &Schedule::nchunks)
      .def_readwrite("chunks_per_rank", &Schedule::chunks_per_rank)
      .def_readwrite("root", &Schedule::root)
      .def_readwrite("chunk_bytes", &Schedule::chunk_bytes)
      .def_readwrite("bytes", &Schedule::bytes)
      .def_readwrite("owner", &Schedule::owner)
      .def_readwrite("routes", &Schedule::routes)
      .def_readwrite("time_us", &Schedule::time_us)
      .def_readwrite("seed", &Schedule::seed)
      .def_property_readonly("num_transfers", [](const Schedule& s) { return s.transfers.size(); })
      .def_property_readonly("timed", &Schedule::timed)
      .def("transfer_columns", [](const Schedule& s) {
        py::dict d;
        d["chunk"] = column<std::int32_t>(s, [](const Transfer& t) { return t.chunk; });
        d["src"] = column<std::int32_t>(s, [](const Transfer& t) { return t.src; });
        d["dst"] = column<std::int32_t>(s, [](const Transfer& t) { return t.dst; });
        d["start_us"] = column<double>(s, [](const Transfer& t) { return t.start; });
        d["end_us"] = column<double>(s, [](const Transfer& t) { return t.end; });
        d["op"] = column<std::int32_t>(s, [](const Transfer& t) { return static_cast<std::int32_t>(t.op); });
        d["route"] = column<std::int32_t>(s, [](const Transfer& t) { return t.route; });
        d["step"] = column<std::int32_t>(s, [](const Transfer& t) { return t.step; });
        d["order"] = column<std::int32_t>(s, [](const Transfer& t) { return t.order; });
        return d;
      })
      .def("set_transfers",
           [](Schedule& s, py::array_t<std::int32_t, py::array::c_style | py::array::forcecast> chunk,
              py::array_t<std::int32_t, py::array::c_style | py::array::forcecast> src,
              py::array_t<std::int32_t, py::array::c_style | py::array::forcecast> dst,
              py::array_t<double, py::array::c_style | py::array::forcecast> start,
              py::array_t<double, py::array::c_style | py::array::forcecast> end,
              py::array_t<std::int32_t, py::array::c_style | py::array::forcecast> op,
              py::array_t<std::int32_t, py::array::c_style | py::array::forcecast> route,
              py::array_t<std::int32_t, py::array::c_style | py::array::forcecast> step,
              std::optional<py::array_t<std::int32_t, py::array::c_style | py::array::forcecast>> order) {
             const auto n = chunk.size();
             if (src.size() != n || dst.size() != n || start.size() != n || end.size() != n || op.size() != n ||
                 route.size() != n || step.size() != n || (order && order->size() != n))
               throw Error("transfer columns have different lengths");
             const auto* c = chunk.data();
             const auto* a = src.data();
             const auto* b = dst.data();
             const auto* t0 = start.data();
             const auto* t1 = end.data();
             const auto* o = op.data();
             const auto* r = route.data();
             const auto* k = step.data();
             const std::int32_t* ord = order ? order->data() : nullptr;
             std::vector<Transfer> tr(static_cast<size_t>(n));
             for (py::ssize_t i = 0; i < n; ++i) {
               if (o[i] != 0 && o[i] != 1) throw Error("transfer " + std::to_string(i) + ": op must be 0 or 1");
               tr[static_cast<size_t>(i)] = Transfer{c[i], a[i], b[i], t0[i], t1[i], r[i], k[i],
                                                     o[i] ? Op::Reduce : Op::Copy, ord ? ord[i] : -1};
             }
             s.transfers = std::move(tr);
           },
           py::arg("chunk"), py::arg("src"), py::arg("dst"), py::arg("start"), py::arg("end"), py::arg("op"),
           py::arg("route"), py::arg("step"), py::arg("order") = py::none())
      .def("assign_reduction_order", [](Schedule& s) { assign_reduction_order(s); })
      .def("to_json", [](const Schedule& s, const Topology* t) { return schedule_to_json(s, t); },
           py::arg("topology") = nullptr);

  m.def("synthesize",
        [](const Topology& t, const std::string& coll, double bytes, int chunks, int seeds, int threads,
           std::uint64_t base_seed, int root, bool record, double max_memory_bytes, const py::object& progress,
           bool direct) {
          SynthOptions o = synth_options(coll, bytes, chunks, seeds, threads, base_seed, root, max_memory_bytes);
          o.record = record;
          o.direct_candidate = direct;
          std::atomic<bool> stop{false};
          std::atomic<std::uint64_t> deliveries{0};
          o.stop = &stop;
          o.deliveries = &deliveries;
          SynthStats st;
          Schedule s;
          run_interruptible(stop, deliveries, progress, [&] { s = synthesize(t, o, &st); });
          return py::make_tuple(std::move(s), stats_dict(st));
        },
        py::arg("topology"), py::arg("collective"), py::arg("bytes"), py::arg("chunks") = 0, py::arg("seeds") = 1,
        py::arg("threads") = 0, py::arg("base_seed") = 1, py::arg("root") = 0, py::arg("record") = true,
        py::arg("max_memory_bytes") = 0.0, py::arg("progress") = py::none(), py::arg("direct") = true);

  m.def("synthesize_to_stream",
        [](const Topology& t, const std::string& coll, double bytes, int chunks, int seeds, int threads,
           std::uint64_t base_seed, int root, const std::string& path, double max_memory_bytes,
           const py::object& progress) {
          SynthOptions o = synth_options(coll, bytes, chunks, seeds, threads, base_seed, root, max_memory_bytes);
          std::atomic<bool> stop{false};
          std::atomic<std::uint64_t> deliveries{0};
          o.stop = &stop;
          o.deliveries = &deliveries;
          SynthStats st;
          Schedule s;
          std::uint64_t written = 0;
          run_interruptible(stop, deliveries, progress,
                            [&] { s = synthesize_to_stream(t, o, path, &st, &written); });
          py::dict d = stats_dict(st);
          d["bytes_written"] = written;
          return py::make_tuple(std::move(s), d);
        },
        py::arg("topology"), py::arg("collective"), py::arg("bytes"), py::arg("chunks"), py::arg("seeds"),
        py::arg("threads"), py::arg("base_seed"), py::arg("root"), py::arg("path"), py::arg("max_memory_bytes"),
        py::arg("progress") = py::none());

  py::class_<StreamSection>(m, "StreamSection")
      .def(py::init<>())
      .def_readwrite("mirror", &StreamSection::mirror)
      .def_readwrite("blocks_of", &StreamSection::blocks_of)
      .def_readwrite("routes", &StreamSection::routes)
      .def_readwrite("route_us", &StreamSection::route_us);
  m.def("read_schedule_stream",
        [](const std::string& path, const std::vector<StreamSection>& sections, Schedule& s,
           const std::vector<int>& route_src, const std::vector<int>& route_dst) {
          py::gil_scoped_release rel;
          read_schedule_stream(path, sections, s, route_src, route_dst);
        });

  m.def("check",
        [](const Schedule& s, const Topology* t, bool exact_durations, py::object progress) {
          CheckOptions o;
          o.exact_durations = exact_durations;
          if (!progress.is_none()) {
            // Called with the GIL released: take it for the Python callback, at most every 2^20 units of work.
            o.progress = [&progress](std::uint64_t done, std::uint64_t total) {
              py::gil_scoped_acquire g;
              progress(done, total);
            };
          }
          CheckResult r;
          {
            py::gil_scoped_release rel;
            r = check(s, t, o);
          }
          py::dict d;
          d["ok"] = r.ok;
          d["errors"] = r.errors;
          d["error_count"] = r.error_count;
          d["redundant"] = r.redundant;
          d["transfers"] = r.transfers;
          d["mistimed"] = r.mistimed;
          d["end_us"] = r.end_us;
          return d;
        },
        py::arg("schedule"), py::arg("topology") = nullptr, py::arg("exact_durations") = false,
        py::arg("progress") = py::none());
  m.def("resolve_by_name", &resolve_by_name, py::arg("schedule"), py::arg("ranks"), py::arg("links"),
        py::arg("topology"));

  m.def("simulate", [](const Topology& t, const Schedule& s) {
    SimResult r;
    {
      py::gil_scoped_release rel;
      r = simulate(t, s);
    }
    py::dict d;
    d["time_us"] = r.time_us;
    d["algbw_gbps"] = r.algbw_gbps;
    d["link_busy_us"] = r.link_busy_us;
    d["link_util"] = r.link_util;
    d["timed"] = std::move(r.timed);
    return d;
  });

  m.def("baseline",
        [](const Topology& t, const std::string& algo, const std::string& coll, double bytes, int chunks, int root,
           double max_memory_bytes) {
          return baseline(t, algo, collective_from_string(coll), bytes, chunks, root, max_memory_bytes);
        },
        py::arg("topology"), py::arg("algorithm"), py::arg("collective"), py::arg("bytes"), py::arg("chunks") = 1,
        py::arg("root") = 0, py::arg("max_memory_bytes") = 0.0);
  m.def("lower_bound", [](const Topology& t, const std::string& coll, double bytes, int root) {
    const LowerBound b = lower_bound(t, collective_from_string(coll), bytes, root);
    py::dict d;
    d["time_us"] = b.time_us;
    d["per_npu_us"] = b.per_npu_us;
    d["kind"] = b.kind;
    d["what"] = b.what;
    d["model_us"] = b.model_us;
    d["model_what"] = b.model_what;
    return d;
  }, py::arg("topology"), py::arg("collective"), py::arg("bytes"), py::arg("root") = 0);
  m.def("to_msccl_xml", &to_msccl_xml, py::arg("schedule"), py::arg("name") = "autoccl_tacos");
  m.def("to_mscclpp_json", &to_mscclpp_json, py::arg("schedule"), py::arg("topology"),
        py::arg("name") = "autoccl_tacos");
}
