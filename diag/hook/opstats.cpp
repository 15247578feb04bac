// diag's native library: operator totals (a RecordFunction observer for periodic CPU profiler
// windows), the Flight Recorder's dumps without the GIL, and the backward's "local gradients
// done" mark (both at the end of this file).
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
#if __has_include(<torch/csrc/autograd/engine.h>) && \
    __has_include(<torch/csrc/autograd/python_variable.h>)
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/python_variable.h>
#define DIAG_GRADS_DONE 1
#endif

#include <dlfcn.h>
#include <time.h>
#include <unistd.h>
#if defined(DIAG_HAS_FR) && defined(DIAG_FR_GET) && defined(DIAG_FR_DUMP) && \
    defined(DIAG_FR_BUILD_ID)
// the build found where libtorch_cpu.so keeps the generic ring (diag/hook/elf_symbols.py)
#define DIAG_FR_SINCE 1
#include <elf.h>
#include <link.h>

#include <optional>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
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

#ifdef DIAG_FR_SINCE
// The generic ring read from a record id on: what a harvest needs of torch's dump (entries and
// the groups' configuration and counters) without building the dump of the whole ring. torch
// does not export the ring (FlightRecorder<c10::Event>::get() is a local symbol): the build read
// its address in libtorch_cpu.so's symbol table (DIAG_FR_GET, beside the exported dump_fr_trace's,
// DIAG_FR_DUMP, and the file's build id); here the loaded library must have that build id and
// dump_fr_trace where the file said, or nothing at the other address is ever called.
using GenericFR = c10d::FlightRecorder<c10::Event>;

struct Located {
  GenericFR* fr = nullptr;
  std::string why;  // why not, when fr is null
};

struct ObjectQuery {
  uintptr_t addr = 0;  // an address inside the object looked for
  uintptr_t bias = 0;  // the object's load bias: file address + bias = address in memory
  std::string build_id;
  bool found = false;
};

std::string note_build_id(const char* p, size_t size) {
  static const char hex[] = "0123456789abcdef";
  size_t at = 0;
  while (at + sizeof(ElfW(Nhdr)) <= size) {
    ElfW(Nhdr) h;
    std::memcpy(&h, p + at, sizeof(h));
    const size_t name_at = at + sizeof(h);
    const size_t desc_at = name_at + ((h.n_namesz + 3) & ~size_t{3});
    if (desc_at + h.n_descsz > size) {
      break;
    }
    if (h.n_type == NT_GNU_BUILD_ID && h.n_namesz == 4 && std::memcmp(p + name_at, "GNU", 4) == 0) {
      std::string out;
      for (size_t i = 0; i < h.n_descsz; ++i) {
        const auto byte = static_cast<unsigned char>(p[desc_at + i]);
        out += hex[byte >> 4];
        out += hex[byte & 15];
      }
      return out;
    }
    at = desc_at + ((h.n_descsz + 3) & ~size_t{3});
  }
  return "";
}

int find_object(dl_phdr_info* info, size_t, void* data) {
  auto* q = static_cast<ObjectQuery*>(data);
  bool holds = false;
  for (int i = 0; i < info->dlpi_phnum && !holds; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    const uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
    holds = ph.p_type == PT_LOAD && q->addr >= lo && q->addr < lo + ph.p_memsz;
  }
  if (!holds) {
    return 0;
  }
  q->found = true;
  q->bias = info->dlpi_addr;
  for (int i = 0; i < info->dlpi_phnum && q->build_id.empty(); ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_NOTE) {
      q->build_id = note_build_id(
          reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr), ph.p_filesz);
    }
  }
  return 1;
}

Located locate_generic() {
  Located out;
  void* lib = dlopen("libtorch_cpu.so", RTLD_LAZY | RTLD_NOLOAD);
  void* dump = lib != nullptr ? dlsym(lib, "_ZN4c10d13dump_fr_traceB5cxx11Ebbb") : nullptr;
  if (lib != nullptr) {
    dlclose(lib);  // NOLOAD took a reference: torch holds its own
  }
  if (dump == nullptr) {
    out.why = "libtorch_cpu.so's dump_fr_trace is not loaded";
    return out;
  }
  ObjectQuery q;
  q.addr = reinterpret_cast<uintptr_t>(dump);
  dl_iterate_phdr(&find_object, &q);
  const std::string want = DIAG_STR(DIAG_FR_BUILD_ID);
  if (!q.found || q.build_id != want) {
    out.why = "the loaded libtorch_cpu.so (build id " + q.build_id +
              ") is not the one diag was built against (" + want + ")";
    return out;
  }
  if (q.bias + static_cast<uintptr_t>(DIAG_FR_DUMP) != q.addr) {
    out.why = "libtorch_cpu.so's dump_fr_trace is not where its symbol table says";
    return out;
  }
  auto get = reinterpret_cast<GenericFR* (*)()>(q.bias + static_cast<uintptr_t>(DIAG_FR_GET));
  GenericFR* fr = get();
  if (fr == nullptr) {
    out.why = "the Flight Recorder is not there";
    return out;
  }
  {
    std::lock_guard<std::mutex> guard(fr->mutex_);
    if (fr->max_entries_ > (size_t{1} << 26) || fr->entries_.size() > fr->max_entries_ ||
        fr->next_ > fr->max_entries_) {
      out.why = "the Flight Recorder's ring is not what diag expects";
      return out;
    }
  }
  out.fr = fr;
  return out;
}

const Located& generic_fr() {
  static const Located located = locate_generic();
  return located;
}

struct RawEntry {
  size_t id = 0, pg_id = 0, coll = 0, p2p_seq = 0, op = 0;
  std::string pg_name, pg_desc, profiling_name, thread_name, thread_id;
  int64_t created = 0, timeout_ms = 0;
  bool is_p2p = false, retired = false;
  std::optional<float> duration;
  std::optional<int64_t> started, completed;
  std::vector<std::vector<int64_t>> in_sizes, out_sizes;
  std::vector<std::string> in_dtypes, out_dtypes;
};

struct RawStatus {
  size_t pg_id = 0;
  int64_t enqueued = -1, started = -1, completed = -1;
};

struct RawConfig {
  std::string name, desc, ranks;
};

struct RawRead {
  std::vector<RawEntry> entries;
  std::vector<RawStatus> status;
  std::vector<RawConfig> config;
  size_t next_id = 0, epoch = 0, capacity = 0;
};

std::vector<std::vector<int64_t>> read_sizes(const c10::SmallVector<int64_t, 4>& dims,
                                             const int64_t*& it, const int64_t* end) {
  std::vector<std::vector<int64_t>> out;
  out.reserve(dims.size());
  for (const int64_t dim : dims) {
    std::vector<int64_t> one;
    for (int64_t i = 0; i < dim && it < end; ++i) {
      one.push_back(*it++);
    }
    out.push_back(std::move(one));
  }
  return out;
}

// c10d::ranks_str's text ("[0, 1, 2]"): torch formats it with fmt, which it does not export
std::string ranks_text(const std::vector<uint64_t>& ranks) {
  std::string out = "[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(ranks[i]);
  }
  return out + "]";
}

// Everything a read needs, copied under the ring's mutex (the caller released the GIL): the
// entries of the current epoch from record id `since` on, in record order, their state brought up
// to date as torch's dump does (update_state), and the groups' configuration and counters.
void read_ring(GenericFR* fr, size_t since, bool entries, RawRead& out) {
  std::lock_guard<std::mutex> guard(fr->mutex_);
  out.next_id = fr->id_;
  out.epoch = fr->reset_epoch_;
  out.capacity = fr->max_entries_;
  for (const auto& [pg_id, status] : fr->all_pg_status_) {
    if (status) {
      out.status.push_back(RawStatus{pg_id, status->lastEnqueuedSeq, status->lastStartedSeq,
                                     status->lastCompletedSeq});
    }
  }
  for (const auto& [name, ranks] : fr->pg_name_to_ranks_) {
    out.config.push_back(
        RawConfig{std::get<0>(name), std::get<1>(name), ranks_text(ranks)});
  }
  if (!entries) {
    return;
  }
  const size_t n = fr->entries_.size();
  const size_t next = n == 0 ? 0 : fr->next_ % n;
  std::vector<std::pair<std::thread::id, std::string>> thread_ids;
  for (size_t k = 0; k < n; ++k) {
    const auto& e = fr->entries_[(next + k) % n];
    if (e.reset_epoch_ != fr->reset_epoch_ || e.id_ < since) {
      continue;
    }
    RawEntry r;
    r.id = e.id_;
    r.pg_id = e.pg_id_;
    r.pg_name = std::get<0>(e.pg_name_);
    r.pg_desc = std::get<1>(e.pg_name_);
    r.coll = e.collective_seq_id_;
    r.p2p_seq = e.p2p_seq_id_;
    r.op = e.op_id_;
    r.profiling_name = e.profiling_name_;
    r.thread_name = e.thread_name_;
    // the text torch's dump writes (an ostringstream each: cached per thread)
    auto known = std::find_if(thread_ids.begin(), thread_ids.end(),
                              [&](const auto& t) { return t.first == e.thread_id_; });
    if (known == thread_ids.end()) {
      known = thread_ids.emplace(thread_ids.end(), e.thread_id_, c10::str(e.thread_id_));
    }
    r.thread_id = known->second;
    r.created = e.time_created_;
    r.timeout_ms = e.timeout_ms_;
    r.is_p2p = e.isP2P_;
    r.retired = e.retired_;
    r.duration = e.duration_;
    r.started = e.time_discovered_started_;
    r.completed = e.time_discovered_completed_;
    try {
      if (e.start_ != nullptr && !r.started && e.start_->query()) {
        r.started = c10::getTime();
      }
      if (e.end_ != nullptr && !r.completed && e.end_->query()) {
        r.completed = c10::getTime();
      }
    } catch (const std::exception&) {
      // torch's dump logs and goes on: the state stays as recorded
    }
    const int64_t* it = e.sizes_.data();
    const int64_t* end = it + e.sizes_.size();
    r.in_sizes = read_sizes(e.input_dims_, it, end);
    r.out_sizes = read_sizes(e.output_dims_, it, end);
    for (const auto dtype : e.input_dtypes_) {
      r.in_dtypes.emplace_back(c10::toString(dtype));
    }
    for (const auto dtype : e.output_dtypes_) {
      r.out_dtypes.emplace_back(c10::toString(dtype));
    }
    out.entries.push_back(std::move(r));
  }
}

// Python objects for a read's values, built with the GIL held: the dict keys made once (and kept
// for the process's life), each distinct string of a read made once (a ring repeats its group,
// operation, thread and dtype names).
class Builder {
 public:
  enum Key {
    kRecordId, kPgId, kProcessGroup, kThreadName, kThreadId, kCollSeq, kP2pSeq, kOpId,
    kProfilingName, kCreated, kDuration, kInSizes, kInDtypes, kOutSizes, kOutDtypes, kState,
    kStarted, kCompleted, kRetired, kTimeout, kIsP2p, kNumKeys
  };

  static PyObject* key(Key k) {
    static PyObject** keys = [] {
      static const char* names[kNumKeys] = {
          "record_id", "pg_id", "process_group", "thread_name", "thread_id",
          "collective_seq_id", "p2p_seq_id", "op_id", "profiling_name", "time_created_ns",
          "duration_ms", "input_sizes", "input_dtypes", "output_sizes", "output_dtypes", "state",
          "time_discovered_started_ns", "time_discovered_completed_ns", "retired", "timeout_ms",
          "is_p2p"};
      auto** out = new PyObject*[kNumKeys];  // never freed: see the comment above
      for (int i = 0; i < kNumKeys; ++i) {
        out[i] = PyUnicode_InternFromString(names[i]);
      }
      return out;
    }();
    return keys[k];
  }

  // a new reference to the string's object (one per distinct string of this read)
  pybind11::object str(const std::string& s) {
    auto it = strs_.find(s);
    if (it == strs_.end()) {
      it = strs_.emplace(s, pybind11::str(s)).first;
    }
    return it->second;
  }

  static void set(pybind11::dict& d, Key k, const pybind11::handle& v) {
    if (PyDict_SetItem(d.ptr(), key(k), v.ptr()) != 0) {
      throw pybind11::error_already_set();
    }
  }

  pybind11::list sizes(const std::vector<std::vector<int64_t>>& sizes) {
    pybind11::list out(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      pybind11::list one(sizes[i].size());
      for (size_t j = 0; j < sizes[i].size(); ++j) {
        one[j] = pybind11::int_(sizes[i][j]);
      }
      out[i] = one;
    }
    return out;
  }

  pybind11::list strs(const std::vector<std::string>& values) {
    pybind11::list out(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      out[i] = str(values[i]);
    }
    return out;
  }

 private:
  std::unordered_map<std::string, pybind11::object> strs_;
};

pybind11::object opt_int(const std::optional<int64_t>& v) {
  return v ? pybind11::object(pybind11::int_(*v)) : pybind11::object(pybind11::none());
}

// The read as the dict torch's pickled dump unpickles to (the same keys and values for each
// entry, no stack traces), plus next_record_id, reset_epoch and capacity; None where this
// process's ring cannot be read.
pybind11::object fr_since(int64_t since, bool entries) {
  const Located& at = generic_fr();
  if (at.fr == nullptr) {
    return pybind11::none();
  }
  RawRead raw;
  {
    pybind11::gil_scoped_release release;
    read_ring(at.fr, static_cast<size_t>(std::max<int64_t>(since, 0)), entries, raw);
  }
  Builder b;
  pybind11::dict config;
  for (const auto& c : raw.config) {
    pybind11::dict one;
    one["name"] = b.str(c.name);
    one["desc"] = b.str(c.desc);
    one["ranks"] = c.ranks;
    config[b.str(c.name)] = one;
  }
  pybind11::dict status;
  for (const auto& s : raw.status) {
    pybind11::dict one;
    one["last_enqueued_collective"] = s.enqueued;
    one["last_started_collective"] = s.started;
    one["last_completed_collective"] = s.completed;
    status[pybind11::str(std::to_string(s.pg_id))] = one;
  }
  static const pybind11::handle states[3] = {
      pybind11::str("scheduled").release(), pybind11::str("started").release(),
      pybind11::str("completed").release()};
  pybind11::list rows(raw.entries.size());
  size_t row = 0;
  for (const auto& r : raw.entries) {
    if (row > 0 && row % 128 == 0) {
      pybind11::gil_scoped_release let_go;  // a chance for the training thread, every 128 rows
    }
    pybind11::dict d;
    Builder::set(d, Builder::kRecordId, pybind11::int_(r.id));
    Builder::set(d, Builder::kPgId, pybind11::int_(r.pg_id));
    Builder::set(d, Builder::kProcessGroup,
                 pybind11::make_tuple(b.str(r.pg_name), b.str(r.pg_desc)));
    Builder::set(d, Builder::kThreadName, b.str(r.thread_name));
    Builder::set(d, Builder::kThreadId, b.str(r.thread_id));
    Builder::set(d, Builder::kCollSeq, pybind11::int_(r.coll));
    Builder::set(d, Builder::kP2pSeq, pybind11::int_(r.p2p_seq));
    Builder::set(d, Builder::kOpId, pybind11::int_(r.op));
    Builder::set(d, Builder::kProfilingName, b.str(r.profiling_name));
    Builder::set(d, Builder::kCreated, pybind11::int_(r.created));
    if (r.duration) {
      Builder::set(d, Builder::kDuration, pybind11::float_(static_cast<double>(*r.duration)));
    }
    Builder::set(d, Builder::kInSizes, b.sizes(r.in_sizes));
    Builder::set(d, Builder::kInDtypes, b.strs(r.in_dtypes));
    Builder::set(d, Builder::kOutSizes, b.sizes(r.out_sizes));
    Builder::set(d, Builder::kOutDtypes, b.strs(r.out_dtypes));
    Builder::set(d, Builder::kState, states[r.completed ? 2 : (r.started ? 1 : 0)]);
    Builder::set(d, Builder::kStarted, opt_int(r.started));
    Builder::set(d, Builder::kCompleted, opt_int(r.completed));
    Builder::set(d, Builder::kRetired, pybind11::bool_(r.retired));
    Builder::set(d, Builder::kTimeout, pybind11::int_(r.timeout_ms));
    Builder::set(d, Builder::kIsP2p, pybind11::bool_(r.is_p2p));
    rows[row++] = d;
  }
  pybind11::dict out;
  out["pg_config"] = config;
  out["pg_status"] = status;
  out["entries"] = rows;
  out["next_record_id"] = raw.next_id;
  out["reset_epoch"] = raw.epoch;
  out["capacity"] = raw.capacity;
  return out;
}

// The record id the ring gives its next entry, and its reset epoch: the pacer's probe (a read
// without entries builds the groups' dicts: ~50 us beside a busy training thread).
pybind11::object fr_next_id() {
  const Located& at = generic_fr();
  if (at.fr == nullptr) {
    return pybind11::none();
  }
  size_t id = 0, epoch = 0;
  {
    pybind11::gil_scoped_release release;
    std::lock_guard<std::mutex> guard(at.fr->mutex_);
    id = at.fr->id_;
    epoch = at.fr->reset_epoch_;
  }
  return pybind11::make_tuple(id, epoch);
}

std::string fr_since_why() { return generic_fr().why; }
#endif

#ifdef DIAG_GRADS_DONE
// The "local gradients done" mark of a backward (diag/hook/core.py, before_backward): a pre-hook
// on the root's autograd node queues, once, an engine final callback that records the monotonic
// clock (Python's perf_counter_ns) and the training thread's run-queue delay. Queued when the
// root node runs, before any callback the backward's own hooks queue (DDP's reducer queues its
// gradient sync's wait as buckets fill), it runs once the graph's last node has run and before
// those. What the hook's Python pre-hook and callback do, without two calls into Python (the GIL
// taken twice) per backward: ~5 instead of ~25 us on the training thread (bench/overhead_parts).
namespace grads {

std::atomic<uint64_t> armed{0};  // the generation of the backward armed last
std::atomic<int64_t> done_ns{0};  // its mark (0: not reached)
std::atomic<int64_t> done_runq{-1};  // the run-queue delay then (-1: unknown)
std::atomic<int> runq_fd{-1};  // the training thread's schedstat, opened by the hook

int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// the second field of "run_ns wait_ns timeslices" (diag/hook/sched.py); -1 where unreadable
int64_t runqueue_ns() {
  const int fd = runq_fd.load(std::memory_order_relaxed);
  if (fd < 0) {
    return -1;
  }
  char buf[128];
  const ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) {
    return -1;
  }
  buf[n] = '\0';
  char* end = buf;
  std::strtoll(buf, &end, 10);
  char* start = end;
  const long long wait = std::strtoll(start, &end, 10);
  return end == start ? -1 : static_cast<int64_t>(wait);
}

void record(uint64_t gen) {
  if (armed.load(std::memory_order_acquire) != gen) {
    return;  // a later backward was armed: this mark is not its
  }
  done_runq.store(runqueue_ns(), std::memory_order_relaxed);
  done_ns.store(monotonic_ns(), std::memory_order_release);
}

struct Mark final : torch::autograd::FunctionPreHook {
  explicit Mark(uint64_t g) : gen(g) {}
  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& grads) override {
    const uint64_t g = gen.load(std::memory_order_relaxed);
    if (armed.load(std::memory_order_acquire) == g && !fired.exchange(true)) {
      torch::autograd::Engine::get_default_engine().queue_callback([g]() { record(g); });
    }
    return grads;
  }
  std::atomic<uint64_t> gen;
  std::atomic<bool> fired{false};
};

// Arm the mark on a tensor's autograd node (the training thread, holding the GIL); false when it
// has none (a leaf, a tensor without grad): then no mark comes. A node kept for another backward
// (retain_graph) has its mark re-armed, not one more hook per call.
bool arm(pybind11::handle obj) {
  if (!THPVariable_Check(obj.ptr())) {
    return false;
  }
  const auto& fn = THPVariable_Unpack(obj.ptr()).grad_fn();  // shared or intrusive, by torch
  if (!fn) {
    return false;
  }
  done_ns.store(0, std::memory_order_relaxed);
  const uint64_t g = armed.load(std::memory_order_relaxed) + 1;
  Mark* mark = nullptr;
  for (const auto& hook : fn->pre_hooks()) {
    if ((mark = dynamic_cast<Mark*>(hook.get())) != nullptr) {
      break;
    }
  }
  if (mark != nullptr) {
    mark->fired.store(false, std::memory_order_relaxed);
    mark->gen.store(g, std::memory_order_relaxed);
  } else {
    fn->add_pre_hook(std::make_unique<Mark>(g));
  }
  armed.store(g, std::memory_order_release);
  return true;
}

// (mark ns, run-queue ns or -1) of the backward armed last, None when it did not reach the mark
pybind11::object done() {
  const int64_t t = done_ns.load(std::memory_order_acquire);
  if (t == 0) {
    return pybind11::none();
  }
  return pybind11::make_tuple(t, done_runq.load(std::memory_order_relaxed));
}

}  // namespace grads
#endif

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
#ifdef DIAG_FR_SINCE
  m.def("fr_since", &fr_since, pybind11::arg("since"), pybind11::arg("entries") = true);
  m.def("fr_since_why", &fr_since_why);
  m.def("fr_next_id", &fr_next_id);
#endif
#ifdef DIAG_GRADS_DONE
  m.def("grads_arm", &grads::arm, pybind11::arg("tensor"));
  m.def("grads_done", &grads::done);
  m.def("grads_runq_fd", [](int fd) { grads::runq_fd.store(fd); }, pybind11::arg("fd"));
#endif
  m.attr("SCOPE_FUNCTION") = static_cast<int>(at::RecordScope::FUNCTION);
  m.attr("SCOPE_BACKWARD") = static_cast<int>(at::RecordScope::BACKWARD_FUNCTION);
  m.attr("SCOPE_USER") = static_cast<int>(at::RecordScope::USER_SCOPE);
}
