// diag's native library: operator totals (a RecordFunction observer for periodic CPU profiler
// windows) and the Flight Recorder's dumps without the GIL (at the end of this file).
//
// torch's profiler (Kineto) keeps every operator call of a window and builds its trace when it
// stops: ~2-3 us per call on the training thread (a window step +40-50 % on a CPU job of small
// operators). This observer keeps, per operator name, the number of calls, their summed,
// median and longest durations: ~0.3 us per call while on (most of it torch's own dispatch
// once any observer is on) and ~0.1 ms to stop. Built once per torch by diag
// (python -m diag.hook.opstats build), loaded by the hook (diag/hook/opstats.py).
//
// The callback is thread-local to the thread that calls start() (the training thread); a record
// begun there and ended on another thread (a gloo worker ends a collective's record) still
// calls on_exit there, so the state is guarded by a mutex and never freed: a record that ends
// after stop() finds it (and is dropped: only records begun while on are counted).

#include <ATen/record_function.h>
#include <pybind11/pybind11.h>
#if __has_include(<torch/csrc/distributed/c10d/FlightRecorder.hpp>)
#include <torch/csrc/distributed/c10d/FlightRecorder.hpp>
#define DIAG_HAS_FR 1
#endif
#include <pybind11/stl.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

// the build's key, given bare on the command line (-DDIAG_OPSTATS_KEY=<hex>): made a string here
#define DIAG_STR2(x) #x
#define DIAG_STR(x) DIAG_STR2(x)
#ifdef DIAG_OPSTATS_KEY
#define DIAG_KEY DIAG_STR(DIAG_OPSTATS_KEY)
#else
#define DIAG_KEY "unknown"
#endif

namespace {

struct Started : at::ObserverContext {
  int64_t t0 = 0;
  uint64_t epoch = 0;
};

struct Stat {
  std::string name;
  int scope = 0;
  int64_t total = 0;
  int64_t longest = 0;
  std::vector<int64_t> durations;
};

struct State {
  std::mutex mu;
  uint64_t epoch = 0;  // which start() a record belongs to
  size_t max_calls = 0;
  size_t calls = 0;
  int64_t dropped = 0;
  // a name's pointer -> its stat (checked on use: see on_exit)
  std::unordered_map<const char*, size_t> by_ptr;
  std::unordered_map<std::string, size_t> by_name;
  std::vector<Stat> stats;
};

State& state() {
  static State* s = new State();  // never freed: see the header
  return *s;
}

std::atomic<uint64_t> g_epoch{0};
at::CallbackHandle g_handle = 0;

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction&) {
  auto started = std::make_unique<Started>();
  started->epoch = g_epoch.load(std::memory_order_relaxed);
  started->t0 = now_ns();
  return started;
}

void on_exit(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  const int64_t t1 = now_ns();
  if (ctx == nullptr) return;
  const auto* started = static_cast<const Started*>(ctx);
  const int64_t duration = std::max<int64_t>(0, t1 - started->t0);
  const char* name = fn.name();
  if (name == nullptr) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (started->epoch != s.epoch) return;  // begun in an earlier window
  if (s.calls >= s.max_calls) {
    ++s.dropped;
    return;
  }
  ++s.calls;
  size_t index = 0;
  // the name's pointer first (an operator's name lives as long as the process), checked
  // against the name kept (an annotation's or autograd node's name is a string of its record,
  // whose memory a later record may reuse for another name)
  auto hit = s.by_ptr.find(name);
  if (hit != s.by_ptr.end() && std::strcmp(s.stats[hit->second].name.c_str(), name) == 0) {
    index = hit->second;
  } else {
    std::string key(name);
    auto named = s.by_name.find(key);
    if (named == s.by_name.end()) {
      index = s.stats.size();
      Stat stat;
      stat.name = key;
      stat.scope = static_cast<int>(fn.scope());
      s.stats.push_back(std::move(stat));
      s.by_name.emplace(std::move(key), index);
    } else {
      index = named->second;
    }
    s.by_ptr[name] = index;
  }
  Stat& stat = s.stats[index];
  stat.total += duration;
  stat.longest = std::max(stat.longest, duration);
  stat.durations.push_back(duration);
}

int64_t median_of(std::vector<int64_t>& d) {
  if (d.empty()) return 0;
  const size_t mid = d.size() / 2;
  std::nth_element(d.begin(), d.begin() + mid, d.end());
  int64_t upper = d[mid];
  if (d.size() % 2 == 1) return upper;
  const int64_t lower = *std::max_element(d.begin(), d.begin() + mid);
  return lower + (upper - lower) / 2;
}

// Start counting on the calling thread; false when already on.
bool start(size_t max_calls) {
  if (g_handle != 0) return false;
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.epoch = g_epoch.fetch_add(1) + 1;
    s.max_calls = max_calls;
    s.calls = 0;
    s.dropped = 0;
    s.by_ptr.clear();
    s.by_name.clear();
    s.stats.clear();
  }
  g_handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(on_enter, on_exit)
          .needsInputs(false)
          .needsOutputs(false)
          .needsIds(false)
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
                   at::RecordScope::USER_SCOPE}));
  return true;
}

// Stop (on the thread that started) and return ([(name, scope, calls, total, median, max)],
// calls not counted beyond max_calls).
pybind11::tuple stop() {
  if (g_handle != 0) {
    at::removeCallback(g_handle);
    g_handle = 0;
  }
  std::vector<Stat> stats;
  int64_t dropped = 0;
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    s.epoch = 0;  // records still open now end uncounted
    stats.swap(s.stats);
    dropped = s.dropped;
    s.by_ptr.clear();
    s.by_name.clear();
  }
  pybind11::list rows;
  for (auto& stat : stats) {
    const auto calls = static_cast<int64_t>(stat.durations.size());
    const int64_t median = median_of(stat.durations);
    rows.append(pybind11::make_tuple(stat.name, stat.scope, calls, stat.total, median,
                                     stat.longest));
  }
  return pybind11::make_tuple(rows, dropped);
}

bool running() { return g_handle != 0; }

// The Flight Recorder's pickled dumps without stack traces, what torch's _dump_fr_trace /
// _dump_nccl_trace(includeCollectives, includeStackTraces=False) return, built with the GIL
// released: torch's bindings hold it throughout (~5 us per entry, ~3 ms for a 512-entry ring),
// which stalls the training thread whenever it needs Python meanwhile (diag/hook/fr_dump.py).
using DumpFn = std::string (*)(bool, bool, bool);

pybind11::object dump_with(DumpFn fn, bool include_collectives) {
  if (fn == nullptr) {
    return pybind11::none();
  }
  std::string out;
  {
    pybind11::gil_scoped_release release;
    out = fn(include_collectives, false, false);
  }
  return pybind11::bytes(out);
}

// torch's generic ring (gloo's entries): declared by its header where this torch ships it.
DumpFn generic_dump() {
#ifdef DIAG_HAS_FR
  // a lambda, not the function's address: a later torch adds a defaulted parameter
  return [](bool collectives, bool stacks, bool active) {
    return c10d::dump_fr_trace(collectives, stacks, active);
  };
#else
  return nullptr;
#endif
}

// NCCL's ring: c10d::dump_nccl_trace lives in libtorch_cuda, declared only in CUDA builds (its
// header needs USE_C10D_NCCL), so it is looked up at run time, by its mangled name; nullptr in a
// CPU build, or where it is not loaded.
DumpFn nccl_dump() {
  static const DumpFn fn = [] {
    const char* name = "_ZN4c10d15dump_nccl_traceB5cxx11Ebbb";
    void* sym = dlsym(RTLD_DEFAULT, name);
    if (sym == nullptr) {
      void* lib = dlopen("libtorch_cuda.so", RTLD_LAZY | RTLD_NOLOAD);
      if (lib != nullptr) {
        sym = dlsym(lib, name);
      }
    }
    return reinterpret_cast<DumpFn>(sym);
  }();
  return fn;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "diag's operator totals for periodic CPU profiler windows";
  m.def("start", &start, pybind11::arg("max_calls"));
  m.def("stop", &stop);
  m.def("running", &running);
  m.def("key", []() { return std::string(DIAG_KEY); });
  m.def("fr_dump", [](bool c) { return dump_with(generic_dump(), c); },
        pybind11::arg("include_collectives"));
  m.def("nccl_dump", [](bool c) { return dump_with(nccl_dump(), c); },
        pybind11::arg("include_collectives"));
  m.attr("SCOPE_FUNCTION") = static_cast<int>(at::RecordScope::FUNCTION);
  m.attr("SCOPE_BACKWARD") = static_cast<int>(at::RecordScope::BACKWARD_FUNCTION);
  m.attr("SCOPE_USER") = static_cast<int>(at::RecordScope::USER_SCOPE);
}
