#include "perf_model.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "json.h"

namespace emu {

uint64_t mix64(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

PerfModel PerfModel::builtin() {
  PerfModel m;
  auto set = [&m](int a, int p, PathParams v) {
    m.paths[a][p] = v;
    m.have[a][p] = true;
  };
  set(kRing, kSimple, {6.0, 1.2, 15.0, 360.0, 4.0, 0.1, 0.1});
  set(kRing, kLL128, {5.0, 0.8, 14.0, 330.0, 4.0, 0.1, 0.1});
  set(kRing, kLL, {4.0, 0.5, 6.0, 145.0, 4.0, 0.1, 0.1});
  set(kTree, kSimple, {7.0, 1.5, 10.0, 240.0, 4.0, 0.1, 0.1});
  set(kTree, kLL128, {6.0, 1.0, 9.0, 220.0, 4.0, 0.1, 0.1});
  set(kTree, kLL, {5.0, 0.6, 4.0, 100.0, 4.0, 0.1, 0.1});
  return m;
}

bool PerfModel::loadFile(const std::string& path, std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = "cannot open model file " + path;
    return false;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    json::Value root = json::parse(ss.str());
    if (!root.has("paths")) throw std::runtime_error("no 'paths'");
    PerfModel m = builtin();
    for (auto& kv : root.at("paths").obj) {
      size_t slash = kv.first.find('/');
      if (slash == std::string::npos) throw std::runtime_error("bad path key " + kv.first);
      int a = parseAlgo(kv.first.substr(0, slash));
      int p = parseProto(kv.first.substr(slash + 1));
      if (a < 0 || p < 0) throw std::runtime_error("bad path key " + kv.first);
      const json::Value& v = kv.second;
      PathParams pp = m.paths[a][p];
      pp.latUs = v.number("lat_us", pp.latUs);
      pp.stepUs = v.number("step_us", pp.stepUs);
      pp.bwCh = v.number("bw_ch_gbs", pp.bwCh);
      pp.bwMax = v.number("bw_max_gbs", pp.bwMax);
      pp.knee = v.number("knee", pp.knee);
      pp.chunkOverheadUs = v.number("chunk_overhead_us", pp.chunkOverheadUs);
      pp.fill = v.number("fill", pp.fill);
      if (!(pp.bwCh > 0) || !(pp.bwMax > 0) || !(pp.knee > 0)) throw std::runtime_error("non-positive bandwidth in " + kv.first);
      m.paths[a][p] = pp;
      m.have[a][p] = true;
    }
    if (root.has("coll_bw_scale"))
      for (int f = 0; f < kFuncs; ++f) m.collScale[f] = root.at("coll_bw_scale").number(collName(f), 1.0);
    if (root.has("noise")) {
      const json::Value& n = root.at("noise");
      m.sigma = n.number("sigma", m.sigma);
      m.outlierP = n.number("outlier_p", m.outlierP);
      m.outlierMin = n.number("outlier_min", m.outlierMin);
      m.outlierMax = n.number("outlier_max", m.outlierMax);
    }
    if (root.has("load")) {
      const json::Value& l = root.at("load");
      m.commSlow = l.number("comm_slow", m.commSlow);
      m.commSlowPerCh = l.number("comm_slow_per_ch", m.commSlowPerCh);
      m.gemmBase = l.number("gemm_base", m.gemmBase);
      m.gemmPerCh = l.number("gemm_per_ch", m.gemmPerCh);
      for (int p = 0; p < kProtos; ++p) {
        m.gemmProto[p] = l.number(std::string("gemm_proto_") + protoName(p), m.gemmProto[p]);
        if (!(m.gemmProto[p] >= 0)) throw std::runtime_error(std::string("negative load.gemm_proto_") + protoName(p));
      }
    }
    m.source = path;
    *this = m;
  } catch (const std::exception& e) {
    *error = path + ": " + e.what();
    return false;
  }
  return true;
}

double PerfModel::busFactor(int func, int nRanks) {
  const double n = nRanks;
  if (func == ncclabi::kAllReduce) return 2.0 * (n - 1) / n;
  if (func == ncclabi::kAllGather || func == ncclabi::kReduceScatter) return (n - 1) / n;
  return 1.0;
}

int PerfModel::steps(int func, int algo, int nRanks) {
  if (algo == kTree) {
    int depth = 0;
    while ((1 << depth) < nRanks) ++depth;
    return 2 * std::max(depth, 1);
  }
  return func == ncclabi::kAllReduce ? 2 * (nRanks - 1) : std::max(nRanks - 1, 1);
}

double PerfModel::meanUs(int func, int nRanks, size_t bytes, int algo, int proto, int channels, size_t chunk,
                         double load) const {
  const PathParams& pp = have[algo][proto] ? paths[algo][proto] : paths[kRing][kSimple];
  const int ch = std::max(channels, 1);
  const int st = steps(func, algo, nRanks);
  const double scale = collScale[func];
  const double x = ch * pp.bwCh * scale;
  const double cap = pp.bwMax * scale;
  double bw = x / std::pow(1.0 + std::pow(x / cap, pp.knee), 1.0 / pp.knee);  // GB/s == bytes/ns
  bw /= 1.0 + std::max(load, 0.0) * (commSlow + commSlowPerCh * ch / 64.0);
  const double bus = static_cast<double>(bytes) * busFactor(func, nRanks);
  // A channel's data of one step, split by the chunk into pieces that pipeline: the last piece of each step
  // costs its transfer time (fill: measured on 2 x H200, where a 1-step all_gather gains from smaller chunks
  // too, as the receiver copies each piece out of its buffer), every piece a fixed cost.
  const double stepCh = bus / (ch * st);
  double t = pp.latUs + st * pp.stepUs + bus / (1000.0 * bw);
  if (chunk > 0 && stepCh > 0) {
    const double c = std::min(static_cast<double>(chunk), stepCh);
    t += pp.fill * st * c / (1000.0 * bw / ch);
    t += std::ceil(stepCh / static_cast<double>(chunk)) * pp.chunkOverheadUs;
  }
  return t;
}

double PerfModel::noiseFactor(uint64_t key) const {
  const uint64_t a = mix64(key), b = mix64(a), c = mix64(b);
  const double u1 = (static_cast<double>(a >> 11) + 0.5) / 9007199254740992.0;
  const double u2 = (static_cast<double>(b >> 11) + 0.5) / 9007199254740992.0;
  const double u3 = (static_cast<double>(c >> 11) + 0.5) / 9007199254740992.0;
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  double f = std::exp(sigma * z);
  if (u3 < outlierP) f *= outlierMin + (outlierMax - outlierMin) * (u3 / outlierP);
  return f;
}

double ComputeRun::kernel(double startNs, double aloneNs, double commSlow, double computeSlow) {
  double t = startNs, rest = aloneNs;
  if (leftNs > 0 && atNs < t) {  // the computation runs alone until the kernel starts
    const double done = std::min(leftNs, t - atNs);
    leftNs -= done;
    atNs += done;
  }
  if (leftNs <= 0) return t + rest;
  if (atNs > t) {  // the kernel runs alone until the computation starts
    if (rest <= atNs - t) return t + rest;
    rest -= atNs - t;
    t = atNs;
  }
  const double kernelBoth = rest * commSlow, computeBoth = leftNs * computeSlow;
  if (kernelBoth <= computeBoth) {  // the kernel ends first, the computation goes on
    leftNs -= kernelBoth / computeSlow;
    atNs = t + kernelBoth;
    return atNs;
  }
  rest -= computeBoth / commSlow;  // the computation ends first, the kernel finishes alone
  atNs = t + computeBoth;
  leftNs = 0;
  return atNs + rest;
}

double PerfModel::gemmSlowdown(int channels, int proto, double load) const {
  const double perCh = gemmPerCh * (proto >= 0 && proto < kProtos ? gemmProto[proto] : 1.0);
  return 1.0 + std::max(load, 0.0) * (gemmBase + perCh * std::max(channels, 1) / 64.0);
}

}  // namespace emu
