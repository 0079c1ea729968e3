#include "engine/metrics.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "engine/trace.h"

namespace autoccl::engine {

namespace {

uint64_t nowUs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

// GB/s for `bytes` in `us` microseconds (0 when unmeasured).
double gbPerS(uint64_t bytes, double us) { return us > 0 ? static_cast<double>(bytes) / (us * 1e3) : 0.0; }

std::string num(double v) { return jsonNumber(v); }

// A sample value of the Prometheus text format, which spells the non-finite ones NaN, +Inf and -Inf.
std::string promNum(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return num(v);
}

// Prometheus label value: backslash, quote and newline escaped.
std::string label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// Writes `text` aside and renames it to `path`; on failure nothing is left aside and *why says what failed.
bool writeAtomically(const std::string& path, const std::string& text, std::string* why) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) {
    *why = "cannot create " + tmp + ": " + std::strerror(errno);
    return false;
  }
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int writeErr = errno;
  if (std::fclose(f) != 0 || !ok) {
    *why = "cannot write " + tmp + ": " + std::strerror(ok ? errno : writeErr);
    std::remove(tmp.c_str());
    return false;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    *why = "cannot rename " + tmp + " to " + path + ": " + std::strerror(errno);
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace

double busBwFactor(const std::string& coll, int nRanks) {
  if (nRanks <= 0) return 1.0;
  const double n = nRanks;
  if (coll == "allreduce") return 2.0 * (n - 1) / n;
  if (coll == "allgather" || coll == "reducescatter") return (n - 1) / n;
  return 1.0;
}

bool MetricsWriter::start(const std::string& dir, double intervalS, std::string* why, Warn warn) {
  std::lock_guard<std::mutex> lock(mu_);
  if (started_) return true;
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *why = "metrics directory " + dir + " is not a directory";
    return false;
  }
  char host[256] = "unknown";
  gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = 0;
  host_ = host;
  dir_ = dir;
  intervalS_ = intervalS > 0 ? intervalS : 10;
  const std::string base = dir + "/autoccl." + host_ + "." + std::to_string(getpid());
  jsonPath_ = base + ".jsonl";
  promPath_ = base + ".prom";
  // A directory where no file can be created (read-only, another user's, /proc) would leave the files
  // unwritten without a word: tried once here, where the caller can still say so.
  const std::string probe = promPath_ + ".tmp";
  FILE* f = std::fopen(probe.c_str(), "w");
  if (!f) {
    *why = "metrics directory " + dir + " takes no files (cannot create " + probe + ": " + std::strerror(errno) + ")";
    return false;
  }
  std::fclose(f);
  std::remove(probe.c_str());
  warn_ = std::move(warn);
  started_ = true;
  thread_ = std::thread([this] { loop(); });
  return true;
}

void MetricsWriter::add(std::weak_ptr<void> owner, Collect collect) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!started_) return;
  // The oldest gone contexts beyond kKeptGone leave the files (sources_ is in registration order).
  size_t gone = 0;
  for (const Source& g : sources_) gone += g.owner.expired();
  for (auto it = sources_.begin(); gone > kKeptGone && it != sources_.end();) {
    if (it->owner.expired()) {
      it = sources_.erase(it);
      --gone;
    } else {
      ++it;
    }
  }
  Source s;
  s.key = owner.lock().get();
  s.owner = std::move(owner);
  s.collect = std::move(collect);
  sources_.push_back(std::move(s));
}

void MetricsWriter::collectAllLocked() {
  for (Source& s : sources_) {
    std::shared_ptr<void> alive = s.owner.lock();
    if (!alive) continue;  // gone: its last collection stays
    s.last = s.collect();
    s.have = true;
  }
}

void MetricsWriter::collectNow(const void* owner) {
  Snapshot snaps;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_) return;
    for (Source& s : sources_) {
      // A gone context's address may be a new one's: only the living source with this address is the caller.
      if (s.key != owner || s.owner.expired()) continue;
      s.last = s.collect();  // the caller (the owner's own finalize) keeps it alive
      s.have = true;
    }
    snaps = snapshotsLocked();
  }
  write(snaps);
}

MetricsWriter::Snapshot MetricsWriter::snapshotsLocked() {
  Snapshot snap;
  snap.seq = ++snapSeq_;
  for (const Source& s : sources_)
    if (s.have) snap.contexts.push_back(s.last);
  return snap;
}

void MetricsWriter::write(const Snapshot& snap) {
  std::lock_guard<std::mutex> io(ioMu_);
  if (snap.seq <= writtenSeq_) return;
  writtenSeq_ = snap.seq;
  const std::vector<ContextMetrics>& snaps = snap.contexts;
  ++writes_;
  if (writeHook_) writeHook_();
  std::string why;
  const bool ok = writeAtomically(jsonPath_, jsonLines(snaps, host_, static_cast<int>(getpid()), nowUs()), &why) &&
                  writeAtomically(promPath_, prometheus(snaps, writes_, static_cast<int>(getpid())), &why);
  if (!ok && !warnedWrite_) {
    warnedWrite_ = true;
    if (warn_) warn_("autoccl: metrics files not written (" + why + "); later failures are not reported");
  }
}

void MetricsWriter::setWriteHookForTest(std::function<void()> hook) {
  std::lock_guard<std::mutex> io(ioMu_);
  writeHook_ = std::move(hook);
}

void MetricsWriter::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::duration<double>(intervalS_), [this] { return stop_; });
    if (stop_) break;
    collectAllLocked();
    Snapshot snaps = snapshotsLocked();
    // Formatting and the file system's time are spent without mu_: a communicator being created (add) or
    // finalized (collectNow) never waits for them.
    lock.unlock();
    write(snaps);
    lock.lock();
  }
}

void MetricsWriter::flush() {
  Snapshot snaps;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_) return;
    collectAllLocked();
    snaps = snapshotsLocked();
  }
  write(snaps);
}

MetricsWriter::~MetricsWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string MetricsWriter::jsonLines(const std::vector<ContextMetrics>& snaps, const std::string& host, int pid,
                                     uint64_t now) {
  std::string out;
  for (const ContextMetrics& c : snaps) {
    const std::string header = "{\"header\":{\"comm\":\"" + commHex(c.commHash) + "\",\"rank\":" +
                               std::to_string(c.rank) + ",\"n_ranks\":" + std::to_string(c.nRanks) +
                               ",\"nnodes\":" + std::to_string(c.nNodes) +
                               "},\"metadata\":{\"source\":\"autoccl\",\"dump_timestamp_us\":" + std::to_string(now) +
                               ",\"hostname\":" + jsonString(host) + ",\"pid\":" + std::to_string(pid) + "}";
    for (const TaskMetricsRow& t : c.tasks) {
      const double f = busBwFactor(t.coll, c.nRanks);
      const double gain = t.ncclUs > 0 && t.appliedUs > 0 ? t.ncclUs / t.appliedUs - 1.0 : 0.0;
      out += header + ",\"task_perf\":{\"coll\":" + jsonString(t.coll) + ",\"coll_msg_size_bytes\":" +
             std::to_string(t.bytes) + ",\"pipe\":" + std::to_string(t.pipe) + ",\"calls\":" + std::to_string(t.calls) +
             ",\"nccl_config\":{\"algo\":" + jsonString(t.ncclAlgo) + ",\"proto\":" + jsonString(t.ncclProto) +
             ",\"channels\":" + std::to_string(t.ncclChannels) + "},\"applied_config\":{\"source\":" +
             jsonString(t.source) + ",\"algo\":" + jsonString(t.algo) + ",\"proto\":" + jsonString(t.proto) +
             ",\"channels\":" + std::to_string(t.channels) + "},\"nccl_exec_time_us\":" + num(t.ncclUs) +
             ",\"nccl_samples\":" + std::to_string(t.ncclSamples) + ",\"applied_exec_time_us\":" + num(t.appliedUs) +
             ",\"applied_samples\":" + std::to_string(t.appliedSamples) + ",\"nccl_algobw_gbs\":" +
             num(gbPerS(t.bytes, t.ncclUs)) + ",\"nccl_busbw_gbs\":" + num(f * gbPerS(t.bytes, t.ncclUs)) +
             ",\"applied_algobw_gbs\":" + num(gbPerS(t.bytes, t.appliedUs)) + ",\"applied_busbw_gbs\":" +
             num(f * gbPerS(t.bytes, t.appliedUs)) + ",\"gain\":" + num(gain) + ",\"exploring_calls\":" +
             std::to_string(t.exploringCalls) + ",\"regret_us\":" + num(t.regretUs) +
             ",\"converged\":" + (t.converged ? "true" : "false") + "}}\n";
    }
    if (c.haveGuard) {
      out += header + ",\"guard\":{\"verdicts\":" + std::to_string(c.guard.verdicts) + ",\"kept_tuned\":" +
             std::to_string(c.guard.keptTuned) + ",\"restored_nccl\":" + std::to_string(c.guard.restoredNccl) +
             ",\"last_tuned_us\":" + num(c.guard.lastTunedUs) + ",\"last_nccl_us\":" + num(c.guard.lastNcclUs) +
             "}}\n";
    }
  }
  return out;
}

std::string MetricsWriter::prometheus(const std::vector<ContextMetrics>& snaps, uint64_t writes, int pid) {
  struct Family {
    const char* name;
    const char* type;
    const char* help;
    std::string samples;
  };
  Family calls{"autoccl_task_calls_total", "counter", "Calls of the task NCCL asked the tuner about.", ""};
  Family time{"autoccl_task_time_seconds", "gauge",
              "Median GPU time of one call, under NCCL's configuration (config=nccl) or the applied one.", ""};
  Family busbw{"autoccl_task_busbw_gigabytes_per_second", "gauge",
               "Bus bandwidth of one call (nccl-tests' definition), per configuration.", ""};
  Family exploring{"autoccl_task_exploring_calls_total", "counter",
                   "Calls the online search spent trying configurations.", ""};
  Family regret{"autoccl_task_regret_seconds", "gauge",
                "Exploration's net cost so far against NCCL's median (online).", ""};
  Family converged{"autoccl_task_converged", "gauge", "1 once the online search pinned a configuration.", ""};
  Family info{"autoccl_task_config_info", "gauge",
              "The configuration NCCL uses and the applied one, as labels (value 1).", ""};
  Family verdicts{"autoccl_guard_verdicts_total", "counter",
                  "Step guard verdicts per communicator (verdict=tuned: kept the tuned plan; nccl: NCCL's choices).",
                  ""};
  Family writesF{"autoccl_metrics_writes_total", "counter", "Times these metrics files were written.", ""};

  for (const ContextMetrics& c : snaps) {
    const std::string base = "comm=\"" + commHex(c.commHash) + "\",rank=\"" + std::to_string(c.rank) + "\"";
    for (const TaskMetricsRow& t : c.tasks) {
      const std::string task = base + ",coll=\"" + label(t.coll) + "\",bytes=\"" + std::to_string(t.bytes) +
                               "\",pipe=\"" + std::to_string(t.pipe) + "\"";
      const double f = busBwFactor(t.coll, c.nRanks);
      calls.samples += std::string(calls.name) + "{" + task + "} " + std::to_string(t.calls) + "\n";
      for (int which = 0; which < 2; ++which) {
        const double us = which ? t.appliedUs : t.ncclUs;
        if (us <= 0) continue;
        const std::string l = task + ",config=\"" + (which ? "applied" : "nccl") + "\"";
        time.samples += std::string(time.name) + "{" + l + "} " + promNum(us * 1e-6) + "\n";
        busbw.samples += std::string(busbw.name) + "{" + l + "} " + promNum(f * gbPerS(t.bytes, us)) + "\n";
      }
      exploring.samples += std::string(exploring.name) + "{" + task + "} " + std::to_string(t.exploringCalls) + "\n";
      regret.samples += std::string(regret.name) + "{" + task + "} " + promNum(t.regretUs * 1e-6) + "\n";
      converged.samples += std::string(converged.name) + "{" + task + "} " + (t.converged ? "1" : "0") + "\n";
      info.samples += std::string(info.name) + "{" + task + ",source=\"" + label(t.source) + "\",nccl_algo=\"" +
                      label(t.ncclAlgo) + "\",nccl_proto=\"" + label(t.ncclProto) + "\",nccl_channels=\"" +
                      std::to_string(t.ncclChannels) + "\",algo=\"" + label(t.algo) + "\",proto=\"" + label(t.proto) +
                      "\",channels=\"" + std::to_string(t.channels) + "\"} 1\n";
    }
    if (c.haveGuard) {
      verdicts.samples += std::string(verdicts.name) + "{" + base + ",verdict=\"tuned\"} " +
                          std::to_string(c.guard.keptTuned) + "\n";
      verdicts.samples += std::string(verdicts.name) + "{" + base + ",verdict=\"nccl\"} " +
                          std::to_string(c.guard.restoredNccl) + "\n";
    }
  }
  // The process's own series: a pid label, so that the files of a node's processes, read as one by
  // node_exporter's textfile collector, never hold the same series twice.
  writesF.samples =
      std::string(writesF.name) + "{pid=\"" + std::to_string(pid) + "\"} " + std::to_string(writes) + "\n";
  std::string out;
  for (const Family* fam : {&calls, &time, &busbw, &exploring, &regret, &converged, &info, &verdicts, &writesF}) {
    out += std::string("# HELP ") + fam->name + " " + fam->help + "\n# TYPE " + fam->name + " " + fam->type + "\n";
    out += fam->samples;
  }
  return out;
}

}  // namespace autoccl::engine
