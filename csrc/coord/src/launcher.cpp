#include "autoccl/coord/launcher.h"

#include <cctype>
#include <cstdint>
#include <cstdlib>

#include "sha256.h"

namespace autoccl::coord {

namespace {

std::string trimmed(const char* v) {
  if (!v) return "";
  std::string s = v;
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

bool parseInt(const std::string& s, long lo, long hi, long* out) {
  if (s.empty() || s.size() > 12) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  long v = std::strtol(s.c_str(), nullptr, 10);
  if (v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool isLoopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 14695981039346656037ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

// Variables of the launcher that identify one job (and one attempt of it): every process of the job
// has the same values, another job has others.
struct Launch {
  enum Kind { kNone, kTorch, kSlurm, kMpi } kind = kNone;
  std::string identity;
  std::string what;  // for messages
};

Launch detectLaunch(const EnvFn& env) {
  auto get = [&](const char* k) { return trimmed(env(k)); };
  Launch l;
  if (!get("MASTER_ADDR").empty() && !get("MASTER_PORT").empty()) {
    l.kind = Launch::kTorch;
    l.what = "torchrun (MASTER_ADDR, MASTER_PORT + 17)";
    l.identity = "torch|" + get("MASTER_ADDR") + "|" + get("MASTER_PORT") + "|" + get("WORLD_SIZE") + "|" +
                 get("TORCHELASTIC_RUN_ID") + "|" + get("TORCHELASTIC_RESTART_COUNT");
    return l;
  }
  std::string nodes = get("SLURM_STEP_NODELIST");
  if (nodes.empty()) nodes = get("SLURM_JOB_NODELIST");
  if (nodes.empty()) nodes = get("SLURM_NODELIST");
  if (!get("SLURM_JOB_ID").empty() && !get("SLURM_STEP_ID").empty() && !nodes.empty()) {
    l.kind = Launch::kSlurm;
    l.what = "Slurm (the first host of the step's node list)";
    l.identity = "slurm|" + get("SLURM_JOB_ID") + "|" + get("SLURM_STEP_ID") + "|" + nodes;
    return l;
  }
  for (const char* size : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MV2_COMM_WORLD_SIZE"}) {
    long n = 0;
    if (parseInt(get(size), 2, 1L << 30, &n)) {
      l.kind = Launch::kMpi;
      l.what = std::string("an MPI launcher (") + size + "=" + std::to_string(n) + ")";
      return l;
    }
  }
  return l;
}

}  // namespace

bool parseHostPort(const std::string& text, const std::string& what, std::string* host, int* port, std::string* err) {
  auto bad = [&](const std::string& why) {
    *err = what + "='" + text + "' " + why;
    return false;
  };
  size_t c = text.rfind(':');
  if (c == std::string::npos || c == 0) return bad("must be host:port");
  std::string h = text.substr(0, c);
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  else if (h.find(':') != std::string::npos) return bad("must be host:port (an IPv6 address in brackets: [::1]:port)");
  if (h.empty() || h.size() > 255) return bad("must be host:port");
  for (char ch : h)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '-' || ch == '_' || ch == ':' || ch == '%'))
      return bad("has a host name with a character other than letters, digits, '.', '-', '_'");
  long p = 0;
  if (!parseInt(text.substr(c + 1), 1, 65535, &p)) return bad("needs a port in [1, 65535]");
  *host = h;
  *port = static_cast<int>(p);
  return true;
}

bool expandHostList(const std::string& list, size_t max, std::vector<std::string>* out, std::string* err) {
  out->clear();
  size_t i = 0;
  auto fail = [&](const std::string& why) {
    *err = "node list '" + list + "': " + why;
    return false;
  };
  while (i < list.size() && out->size() < max) {
    // one item: prefix [ranges ] suffix, up to a comma outside brackets
    size_t j = i;
    int depth = 0;
    while (j < list.size() && (list[j] != ',' || depth > 0)) {
      if (list[j] == '[') ++depth;
      if (list[j] == ']') --depth;
      if (depth < 0 || depth > 1) return fail("unbalanced brackets");
      ++j;
    }
    if (depth != 0) return fail("unbalanced brackets");
    std::string item = list.substr(i, j - i);
    i = j + 1;
    if (item.empty()) continue;
    size_t lb = item.find('[');
    if (lb == std::string::npos) {
      out->push_back(item);
      continue;
    }
    size_t rb = item.find(']', lb);
    std::string prefix = item.substr(0, lb), suffix = item.substr(rb + 1);
    if (suffix.find('[') != std::string::npos) return fail("only one bracket group per host is supported");
    std::string ranges = item.substr(lb + 1, rb - lb - 1);
    size_t k = 0;
    while (k <= ranges.size() && out->size() < max) {
      size_t comma = ranges.find(',', k);
      if (comma == std::string::npos) comma = ranges.size();
      std::string r = ranges.substr(k, comma - k);
      k = comma + 1;
      size_t dash = r.find('-');
      std::string a = r.substr(0, dash), b = dash == std::string::npos ? a : r.substr(dash + 1);
      long lo = 0, hi = 0;
      if (!parseInt(a, 0, 1L << 30, &lo) || !parseInt(b, 0, 1L << 30, &hi) || hi < lo)
        return fail("bad range '" + r + "'");
      for (long n = lo; n <= hi && out->size() < max; ++n) {
        std::string num = std::to_string(n);
        if (num.size() < a.size()) num = std::string(a.size() - num.size(), '0') + num;  // zero padding
        out->push_back(prefix + num + suffix);
      }
      if (comma == ranges.size()) break;
    }
  }
  if (out->empty()) return fail("no host");
  return true;
}

int slurmPort(const std::string& jobId, const std::string& stepId) {
  return 12000 + static_cast<int>(fnv1a("autoccl|" + jobId + "|" + stepId) % 20000);
}

std::string derivedToken(const std::string& secret, const std::string& identity) {
  const std::string key = secret.empty() ? std::string("autoccl coordinator") : secret;
  auto mac = hmacSha256(key.data(), key.size(), identity.data(), identity.size());
  return hex(mac.data(), mac.size());
}

EndpointStatus coordinatorFromEnv(const EnvFn& env, Endpoint* out, std::string* err) {
  auto get = [&](const char* k) { return trimmed(env(k)); };
  const std::string explicitAddr = get("AUTOCCL_COORD_ADDR");
  const std::string token = get("AUTOCCL_COORD_TOKEN");
  const std::string secret = get("AUTOCCL_COORD_SECRET");
  const Launch launch = detectLaunch(env);
  Endpoint ep;
  // A token the user gave wins; else one derived from the launcher's job identity (the same on every
  // host of the job, another for every other job); else none.
  auto tokenFor = [&](const std::string& where) {
    if (!token.empty()) return token;
    if (launch.kind == Launch::kTorch || launch.kind == Launch::kSlurm) {
      ep.tokenDerived = true;
      return derivedToken(secret, where + "|" + launch.identity);
    }
    if (!secret.empty()) {
      ep.tokenDerived = true;
      return derivedToken(secret, where);
    }
    return std::string();
  };

  if (!explicitAddr.empty()) {
    if (!parseHostPort(explicitAddr, "AUTOCCL_COORD_ADDR", &ep.host, &ep.port, err)) return EndpointStatus::kError;
    ep.source = "AUTOCCL_COORD_ADDR";
    ep.token = tokenFor("addr=" + explicitAddr);
    if (ep.token.empty()) {
      *err = "AUTOCCL_COORD_TOKEN is not set (required with AUTOCCL_COORD_ADDR=" + explicitAddr +
             " outside torchrun and srun; or set AUTOCCL_COORD_SECRET, the same on every host)";
      return EndpointStatus::kError;
    }
    *out = ep;
    return EndpointStatus::kOk;
  }
  if (launch.kind == Launch::kTorch) {
    const std::string ma = get("MASTER_ADDR"), mp = get("MASTER_PORT");
    long p = 0;
    if (!parseInt(mp, 1, 65535 - 17, &p)) {
      *err = "MASTER_PORT='" + mp + "' (torchrun) must be a port in [1, 65518]: the online coordinator listens on "
             "MASTER_PORT + 17 (or set AUTOCCL_COORD_ADDR=host:port)";
      return EndpointStatus::kError;
    }
    std::string host = ma;
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    std::string perr;
    if (!parseHostPort(host.find(':') != std::string::npos ? "[" + host + "]:1" : host + ":1", "MASTER_ADDR",
                       &ep.host, &ep.port, &perr)) {
      *err = "MASTER_ADDR='" + ma + "' (torchrun) is not a host name or address";
      return EndpointStatus::kError;
    }
    ep.port = static_cast<int>(p) + 17;
    ep.source = launch.what;
    ep.token = tokenFor("torch");
    *out = ep;
    return EndpointStatus::kOk;
  }
  if (launch.kind == Launch::kSlurm) {
    std::string nodes = get("SLURM_STEP_NODELIST");
    if (nodes.empty()) nodes = get("SLURM_JOB_NODELIST");
    if (nodes.empty()) nodes = get("SLURM_NODELIST");
    std::vector<std::string> hosts;
    std::string lerr;
    if (!expandHostList(nodes, 1, &hosts, &lerr)) {
      *err = "Slurm: cannot read the first host of " + lerr + " (set AUTOCCL_COORD_ADDR=host:port)";
      return EndpointStatus::kError;
    }
    ep.host = hosts.front();
    ep.port = slurmPort(get("SLURM_JOB_ID"), get("SLURM_STEP_ID"));
    ep.source = launch.what;
    ep.token = tokenFor("slurm");
    *out = ep;
    return EndpointStatus::kOk;
  }
  const std::string runAddr = get("AUTOCCL_RUN_ADDR");
  if (!runAddr.empty()) {
    if (!parseHostPort(runAddr, "AUTOCCL_RUN_ADDR", &ep.host, &ep.port, err)) return EndpointStatus::kError;
    ep.token = !token.empty() ? token : get("AUTOCCL_RUN_TOKEN");
    if (ep.token.empty()) {
      *err = "AUTOCCL_RUN_ADDR is set without AUTOCCL_RUN_TOKEN (both come from `autoccl run`)";
      return EndpointStatus::kError;
    }
    ep.singleHost = isLoopback(ep.host);
    ep.source = ep.singleHost ? "autoccl run (this host's loopback address)" : "autoccl run (the launch host)";
    *out = ep;
    return EndpointStatus::kOk;
  }
  if (launch.kind == Launch::kMpi) {
    *err = "under " + launch.what + " no coordinator address can be derived: start the job with `autoccl run -- "
           "mpirun ...` (which hands every rank one), or set AUTOCCL_COORD_ADDR=<host of rank 0>:<port> and "
           "AUTOCCL_COORD_TOKEN on every rank (mpirun -x)";
    return EndpointStatus::kError;
  }
  return EndpointStatus::kNone;
}

}  // namespace autoccl::coord
