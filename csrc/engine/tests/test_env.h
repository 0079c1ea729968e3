// Helpers shared by the engine's test programs: an injectable environment and a scratch directory.
#pragma once

#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <string>

#include "engine/settings.h"
#include "engine/tests/scratch.h"

namespace autoccl::engine::testenv {

// A getenv-like lookup over a fixed map (Settings are read through it, never from the real environment).
inline EnvLookup envOf(std::map<std::string, std::string> m) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(m));
  return [shared](const char* k) -> const char* {
    auto it = shared->find(k);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

// A fresh directory under /tmp whose name starts with `prefix`, removed at exit (scratch.h).
inline std::string tempDir(const std::string& prefix) { return ::autoccl::test::scratchDir(prefix); }

// A TCP port of 127.0.0.1 that was free a moment ago (bound to port 0, then released).
inline int freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// The variables the online coordinator's endpoint is derived from (coord/launcher.h): tests that let
// Coordination read the real environment start from none of them, so that a CI job run under torchrun,
// srun or mpirun cannot turn their in-process board into TCP.
inline void clearLauncherEnv() {
  for (const char* v : {"AUTOCCL_COORD_ADDR", "AUTOCCL_COORD_TOKEN", "AUTOCCL_COORD_SECRET", "AUTOCCL_RUN_ADDR",
                        "AUTOCCL_RUN_TOKEN", "AUTOCCL_COORD_TIMEOUT_MS", "AUTOCCL_COORD_LINGER_MS",
                        "AUTOCCL_COORD_FAULTS", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "TORCHELASTIC_RUN_ID",
                        "TORCHELASTIC_RESTART_COUNT", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_STEP_NODELIST",
                        "SLURM_JOB_NODELIST", "SLURM_NODELIST", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE",
                        "MV2_COMM_WORLD_SIZE"})
    unsetenv(v);
}

}  // namespace autoccl::engine::testenv
