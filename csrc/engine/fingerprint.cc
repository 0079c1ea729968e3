#include "engine/fingerprint.h"

#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <string_view>
#include <vector>

#include "engine/common.h"

namespace autoccl::engine {

std::string quoteValue(const std::string& v) {
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (c == '\n' || c == '\r') c = ' ';
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

std::string Fingerprint::canonical() const {
  return "gpu=" + quoteValue(gpu) + " gpus=" + std::to_string(gpus) + " nccl=" + std::to_string(nccl) +
         " ranks=" + std::to_string(ranks) + " nodes=" + std::to_string(nodes) +
         " nvl_domains=" + std::to_string(nvlDomains);
}

std::string Fingerprint::id() const { return hex16(fnv1a64(canonical())); }

void detectHardware(const std::string& hwOverride, const std::string& procDir, Fingerprint* fp) {
  if (!hwOverride.empty()) {
    std::string model = hwOverride;
    int count = 1;
    size_t x = model.find_last_of("xX");
    if (x != std::string::npos && x + 1 < model.size()) {
      uint64_t n = 0;
      if (parseUint(std::string_view(model).substr(x + 1), &n) && n > 0 && n < 100000) {
        count = static_cast<int>(n);
        model = std::string(trim(std::string_view(model).substr(0, x)));
      }
    }
    fp->gpu = model.empty() ? "unknown" : model;
    fp->gpus = count;
    return;
  }
  std::vector<std::string> models;
  if (DIR* dir = opendir(procDir.c_str())) {
    while (dirent* e = readdir(dir)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream in(procDir + "/" + e->d_name + "/information");
      std::string line;
      while (std::getline(in, line)) {
        if (line.rfind("Model:", 0) == 0) {
          models.emplace_back(trim(std::string_view(line).substr(6)));
          break;
        }
      }
    }
    closedir(dir);
  }
  if (models.empty()) {
    fp->gpu = "unknown";
    fp->gpus = 0;
    return;
  }
  std::sort(models.begin(), models.end());
  fp->gpu = models.front() == models.back() ? models.front() : "mixed";
  fp->gpus = static_cast<int>(models.size());
}

}  // namespace autoccl::engine
