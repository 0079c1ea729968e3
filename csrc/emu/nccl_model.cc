#include "nccl_model.h"

#include <algorithm>
#include <cstring>
#include <strings.h>
#include <vector>

namespace emu {

namespace {
const char* const kFuncStr[kFuncs] = {"Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"};
const char* const kAlgoStr[kAlgos] = {"TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT"};
const char* const kProtoStr[kProtos] = {"LL", "LL128", "SIMPLE"};
// Names NCCL_ALGO / NCCL_PROTO accept (ncclAlgoStr / ncclProtoStr), compared case-insensitively.
const char* const kAlgoEnvStr[kAlgos] = {"Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"};
const char* const kProtoEnvStr[kProtos] = {"LL", "LL128", "Simple"};
const char* const kCollName[kFuncs] = {"broadcast", "reduce", "allgather", "reducescatter", "allreduce"};
const char* const kAlgoName[kAlgos] = {"tree", "ring", "collnetdirect", "collnetchain", "nvls", "nvlstree", "pat"};
const char* const kProtoName[kProtos] = {"ll", "ll128", "simple"};

int lookup(const std::string& s, const char* const* names, int n) {
  for (int i = 0; i < n; ++i)
    if (strcasecmp(s.c_str(), names[i]) == 0) return i;
  return -1;
}
int log2i(long n) {
  int l = 0;
  while (n >>= 1) ++l;
  return l;
}
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// Hardware link classes of the tuner constants: NVLink, PCI, network.
constexpr int kHwNvlink = 0;
constexpr int kHwNet = 2;
constexpr int kHopperIdx = 2;
constexpr int kLLThreadThreshold = 8, kLL128ThreadThreshold = 8, kSimpleThreadThreshold = 64;
constexpr int kMaxDevWorkBatchColls = 16;  // aggregated-latency divisor for non-ring algorithms
}  // namespace

const char* ncclFuncString(int f) { return f >= 0 && f < kFuncs ? kFuncStr[f] : "Invalid"; }
const char* ncclAlgoString(int a) { return a >= 0 && a < kAlgos ? kAlgoStr[a] : "Unknown"; }
const char* ncclProtoString(int p) { return p >= 0 && p < kProtos ? kProtoStr[p] : "Unknown"; }
const char* collName(int f) { return f >= 0 && f < kFuncs ? kCollName[f] : "invalid"; }
const char* algoName(int a) { return a >= 0 && a < kAlgos ? kAlgoName[a] : "undef"; }
const char* protoName(int p) { return p >= 0 && p < kProtos ? kProtoName[p] : "undef"; }
int parseColl(const std::string& s) { return lookup(s, kCollName, kFuncs); }
int parseAlgo(const std::string& s) { return lookup(s, kAlgoName, kAlgos); }
int parseProto(const std::string& s) { return lookup(s, kProtoName, kProtos); }

bool parseEnableList(const char* str, const char* const* elems, int nelems, int* list, std::string* error) {
  // Our reading of NCCL's syntax: ';'-separated entries "[func:]elem,elem" or "[func:]^elem,..."; only the
  // first entry may omit the function prefix; a prefixed entry rewrites that function's row.
  std::string s(str);
  std::vector<std::string> entries = split(s, ';');
  bool first = true;
  const char* const* names = elems ? elems : nelems == kAlgos ? kAlgoEnvStr : kProtoEnvStr;
  for (const std::string& entry : entries) {
    std::vector<std::string> parts = split(entry, ':');
    std::string prefix, elemList;
    if (parts.empty()) { first = false; continue; }
    if (parts.size() == 1) {
      if (!first) {
        *error = "All entries except the first must have a prefix: \"" + s + "\"";
        return false;
      }
      elemList = parts[0];
    } else {
      prefix = parts[0];
      elemList = parts[1];
    }
    first = false;
    int set = 1, unset = 0;
    if (!elemList.empty() && elemList[0] == '^') {
      set = 0;
      unset = 1;
      elemList = elemList.substr(1);
    }
    bool found = false;
    for (int f = 0; f < kFuncs; ++f) {
      if (!prefix.empty() && strcasecmp(prefix.c_str(), kFuncStr[f]) != 0) continue;
      found = true;
      for (int e = 0; e < nelems; ++e) list[f * nelems + e] = unset;
      for (const std::string& el : split(elemList, ',')) {
        int e = lookup(el, names, nelems);
        if (e < 0) {
          *error = "Unrecognized element token \"" + el + "\" when parsing \"" + s + "\"";
          return false;
        }
        list[f * nelems + e] = set;
      }
    }
    if (!found) {
      *error = "Unrecognized prefix token \"" + prefix + "\" when parsing \"" + s + "\"";
      return false;
    }
  }
  return true;
}

void defaultTunerConstants(ncclabi::TunerConstantsV6* c) {
  std::memset(c, 0, sizeof(*c));
  const double base[kAlgos][kProtos] = {{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}, {0, 0, 0}, {0, 0, 0},
                                        {0, 0, 0},        {0, 0, 0},        {8.0, 8.0, 8.0}};
  const double hw[3][kAlgos][kProtos] = {
      {{.6, 1.25, 4.0}, {.6, 1.9, 3.4}, {0, 0, 3.7}, {0, 0, 2.8}, {0, 0, 25}, {0, 0, 25}, {0, 0, 4.0}},
      {{1.0, 1.9, 4.0}, {1.0, 2.5, 5.7}, {0, 0, 3.7}, {0, 0, 2.8}, {0, 0, 0}, {0, 0, 0}, {0, 0, 4.0}},
      {{5.0, 8.5, 14}, {2.7, 4.0, 14.0}, {0, 0, 31}, {0, 0, 30}, {0, 0, 18}, {0, 0, 20.9}, {0, 0, 14}}};
  const double llMax[4][3] = {{39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}, {282.0, 90.0, 70.0}};
  const double ringLL128[4][3] = {{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 36.7}, {73.4, 34.6, 73.4}};
  const double treeLL128[4][3] = {{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}};
  const double tree[4][3] = {{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}};
  std::memcpy(c->baseLatencies, base, sizeof(base));
  std::memcpy(c->hwLatencies, hw, sizeof(hw));
  std::memcpy(c->llMaxBws, llMax, sizeof(llMax));
  std::memcpy(c->perChMaxRingLL128Bws, ringLL128, sizeof(ringLL128));
  std::memcpy(c->perChMaxTreeLL128Bws, treeLL128, sizeof(treeLL128));
  std::memcpy(c->perChMaxTreeBws, tree, sizeof(tree));
}

void CommModel::tune(const ncclabi::TunerConstantsV6& c, const int* algoEnable, const int* protoEnable) {
  for (int a = 0; a < kAlgos; ++a)
    for (int p = 0; p < kProtos; ++p) {
      maxThreads[a][p] = p == kLL128 ? 640 : (a == kRing || a == kTree) ? 512 : 640;
      threadThresholds[a][p] = p == kLL ? kLLThreadThreshold : p == kLL128 ? kLL128ThreadThreshold
                                                                            : kSimpleThreadThreshold;
    }
  threadThresholds[kRing][kLL] *= nRanks;
  std::memset(bandwidths, 0, sizeof(bandwidths));
  std::memset(latencies, 0, sizeof(latencies));
  if (nRanks <= 1) return;
  const int idx2 = nNodes <= 2 ? nNodes - 1 : 2;
  const int idx1 = nNodes == 1 ? kHopperIdx : 0;
  const double llMaxBw = c.llMaxBws[idx1][idx2];
  const double perChTree = c.perChMaxTreeBws[kHopperIdx][idx2];
  const double perChRingLL128 = c.perChMaxRingLL128Bws[kHopperIdx][idx2];
  const double perChTreeLL128 = c.perChMaxTreeLL128Bws[kHopperIdx][idx2];
  const double ppn = static_cast<double>(nRanks) / nNodes;
  const int hw = nNodes == 1 ? kHwNvlink : kHwNet;
  const bool patEnable = nNodes == nRanks;
  for (int coll = 0; coll < kFuncs; ++coll) {
    const int nsteps = coll == ncclabi::kAllReduce ? 2 * (nRanks - 1)
                       : (coll == ncclabi::kReduceScatter || coll == ncclabi::kAllGather) ? nRanks - 1
                                                                                          : nRanks;
    for (int a = 0; a < kAlgos; ++a) {
      if ((coll == ncclabi::kBroadcast || coll == ncclabi::kReduce) && a != kRing) continue;
      if ((coll == ncclabi::kReduceScatter || coll == ncclabi::kAllGather) && a != kPat && a != kRing &&
          a != kNvls && a != kCollNetDirect)
        continue;
      if (coll == ncclabi::kAllReduce && a == kPat) continue;
      if (a == kNvls || a == kNvlsTree) continue;  // NVLS off (NCCL_NVLS_ENABLE=0): no NVLS graph channels
      for (int p = 0; p < kProtos; ++p) {
        if ((coll == ncclabi::kReduceScatter || coll == ncclabi::kAllGather) && a == kPat &&
            (p != kSimple || !patEnable))
          continue;
        const double bw = nNodes <= 2 ? graphBwIntra : graphBwInter;
        double busBw = graphChannels * bw;
        if (a == kRing && p == kLL) busBw = std::min(llMaxBw, busBw * .5);
        if (a == kRing && p == kLL128) busBw = std::min(busBw * 0.92, graphChannels * perChRingLL128);
        if (a == kTree && coll == ncclabi::kAllReduce) busBw = std::min(busBw * .92, graphChannels * perChTree);
        if (a == kTree && p == kLL) busBw = std::min(busBw * 1.0 / 3.8, llMaxBw);
        if (a == kTree && p == kLL128)
          busBw = std::min(busBw * (nNodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0), graphChannels * perChTreeLL128);
        if (a == kPat) busBw *= .75;
        if ((a == kCollNetDirect || a == kCollNetChain)) busBw = 0;  // CollNet not available
        if (!(a != kRing && (coll == ncclabi::kAllGather || coll == ncclabi::kReduceScatter))) {
          double ratio = a == kRing ? static_cast<double>(nRanks) / nsteps : .5;
          busBw *= ratio;
        }
        bandwidths[coll][a][p] = static_cast<float>(busBw);
        double lat = c.baseLatencies[a][p];
        const double intraLat = c.hwLatencies[kHwNvlink][a][p];
        const double interLat =
            ppn == 1 ? c.hwLatencies[kHwNet][kTree][p] : c.hwLatencies[kHwNet][a][p];
        if (a == kRing) {
          if (coll == ncclabi::kReduce || coll == ncclabi::kBroadcast) {
            lat += c.hwLatencies[hw][a][p];
          } else {
            const int nInter = nNodes == 1 ? 0 : coll == ncclabi::kAllReduce ? 2 * (nNodes - 1) : nNodes - 1;
            double intra = intraLat;
            if (nNodes > 1) intra = std::max(intra, p == kSimple ? 3.0 : 1.0);
            lat += (nsteps - nInter) * intra + nInter * interLat;
          }
        } else if (a == kTree) {
          if (coll == ncclabi::kAllReduce) lat += 2 * ((nRanks / nNodes - 1) * intraLat + log2i(nNodes) * interLat);
        } else if (a == kPat) {
          lat += log2i(nNodes) * (interLat / 3.5) + nRanks * 2.8;
        }
        latencies[coll][a][p] = static_cast<float>(lat);
      }
    }
  }
  for (int f = 0; f < kFuncs; ++f)
    for (int a = 0; a < kAlgos; ++a)
      for (int p = 0; p < kProtos; ++p) {
        bool on = protoEnable[f * kProtos + p] != 0 && algoEnable[f * kAlgos + a] != 0;
        if (p == kLL128 && !ll128Enabled && protoEnable[f * kProtos + p] == 2) on = false;
        if (nNodes == 1 && a == kNvlsTree) on = false;
        if (a == kCollNetDirect || a == kCollNetChain || a == kNvls) on = false;
        if (!on) bandwidths[f][a][p] = 0;
      }
}

void CommModel::costTable(int func, size_t nBytes, int numPipeOps, float table[kAlgos][kProtos]) const {
  static const float treeCorrection[kProtos][23] = {
      {1.0f, 1.0f, 1.0f, 1.0f, .9f, .8f, .7f, .7f, .7f, .7f, .6f, .5f, .4f, .4f, .5f, .6f, .7f, .8f, .9f, 1.0f, 1.0f,
       1.0f, 1.0f},
      {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, .9f, .8f, .8f, .8f, .7f, .6f, .6f, .6f, .6f, .6f, .6f, .8f, .9f, .9f, .9f, .9f,
       1.0f, 1.0f},
      {.9f, .9f, .9f, .9f, .9f, .9f, .9f, .8f, .7f, .6f, .6f, .5f, .5f, .5f, .5f, .6f, .7f, .8f, .7f, .7f, .8f, .9f,
       .9f}};
  for (int a = 0; a < kAlgos; ++a)
    for (int p = 0; p < kProtos; ++p) table[a][p] = ncclabi::kCostIgnore;
  if (nRanks == 1) {
    table[kRing][kSimple] = 0.0f;
    return;
  }
  for (int a = 0; a < kAlgos; ++a) {
    for (int p = 0; p < kProtos; ++p) {
      float bw = bandwidths[func][a][p];
      float lat = latencies[func][a][p];
      if (bw == 0) {
        table[a][p] = -1.0f;
        continue;
      }
      int logSize = log2i(static_cast<long>(nBytes >> 6));
      if (a == kTree && func == ncclabi::kAllReduce && logSize >= 0 && logSize < 23) bw *= treeCorrection[p][logSize];
      if (a == kRing && p == kSimple && nNodes > 1 && func == ncclabi::kAllReduce &&
          nBytes / static_cast<size_t>(nChannels * nRanks) >= 64)
        lat *= 1.4f;
      int latCount = a == kRing ? numPipeOps : (numPipeOps + kMaxDevWorkBatchColls - 1) / kMaxDevWorkBatchColls;
      table[a][p] = lat * static_cast<float>(latCount) + static_cast<float>(static_cast<double>(nBytes) / (1000.0 * bw));
    }
  }
}

int CommModel::defaultChannels(int algo, int proto, size_t nBytes) const {
  int nc = nChannels;
  const long nt = maxThreads[algo][proto];
  const long thr = threadThresholds[algo][proto];
  while (static_cast<long>(nBytes) < nc * nt * thr && nc >= 2) nc--;
  return nc;
}

size_t CommModel::grainSize(int proto) { return proto == kLL ? 16 : proto == kLL128 ? 1920 : 512; }

size_t CommModel::defaultChunk(int func, int algo, int proto, size_t partBytes, size_t* bufferMax) const {
  // Default buffers: LL 512 KiB, LL128 4.6875 MiB, Simple 4 MiB; 8 steps each.
  const size_t buff[kProtos] = {524288, 4915200, 4194304};
  const size_t stepSize = buff[proto] / 8;
  size_t chunkSteps = 1;
  if (proto == kSimple && algo == kRing)
    chunkSteps = (func == ncclabi::kBroadcast || func == ncclabi::kReduce) ? 1 : 4;
  size_t chunk = stepSize * chunkSteps;
  if (proto == kLL) chunk /= 2;
  if (proto == kLL128) chunk = (chunk / 16) * 15;
  *bufferMax = chunk;
  if (algo == kTree && proto == kLL128) {
    const double ppn = static_cast<double>(nRanks) / nNodes;
    const double nsteps = 1 + log2i(nNodes) + 0.1 * ppn;
    while (static_cast<double>(partBytes / chunk) < nsteps * 64 / ppn && chunk > 131072) chunk /= 2;
    while (static_cast<double>(partBytes / chunk) < nsteps * 16 / ppn && chunk > 32768) chunk /= 2;
  } else if (func == ncclabi::kAllGather && algo == kPat) {
    while (chunk * 32 > partBytes && chunk > 65536) chunk /= 2;
  } else if (func == ncclabi::kReduceScatter && algo == kPat) {
    while (chunk * 16 > partBytes && chunk > 65536) chunk /= 2;
  }
  return chunk;
}

bool pickAlgoProto(const float table[kAlgos][kProtos], int* algo, int* proto) {
  float minTime = 3600000000.0f;
  *algo = -1;
  *proto = -1;
  for (int a = 0; a < kAlgos; ++a)
    for (int p = 0; p < kProtos; ++p) {
      if (table[a][p] == ncclabi::kCostIgnore) continue;
      if (table[a][p] >= 0.0f && table[a][p] < minTime) {
        *algo = a;
        *proto = p;
        minTime = table[a][p];
      }
    }
  return *algo >= 0;
}

}  // namespace emu
