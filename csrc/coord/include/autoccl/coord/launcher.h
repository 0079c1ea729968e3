// Where the online coordinator of a job is, and its shared secret, from the environment every rank
// process already has: the user's AUTOCCL_COORD_ADDR, else the launcher's own variables (torchrun,
// Slurm's srun), else the address `autoccl run` gave the job (one host, or the launch host under
// mpirun). Every process of a job derives the same endpoint from the same launcher variables, so the
// hosts of a multi-host job meet at one coordinator without anyone typing an address or a token.
// NCCL-free and pure (the environment is injected); docs/architecture.md ("coordinator endpoint").
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace autoccl::coord {

using EnvFn = std::function<const char*(const char*)>;

struct Endpoint {
  std::string host;
  int port = 0;
  std::string token;
  // Where the address came from, for messages ("AUTOCCL_COORD_ADDR", "torchrun (MASTER_ADDR ...)").
  std::string source;
  // The address only serves the processes of one host (autoccl run's loopback address): a
  // communicator spanning several nodes must not use it (each host would meet at its own coordinator).
  bool singleHost = false;
  bool tokenDerived = false;  // derived from the launcher's job identity (no AUTOCCL_COORD_TOKEN)
};

enum class EndpointStatus {
  kNone,   // nothing configured or derivable: the in-process board only
  kOk,     // *out filled
  kError,  // a variable is set but unusable: *err says which and why (one sentence)
};

EndpointStatus coordinatorFromEnv(const EnvFn& env, Endpoint* out, std::string* err);

// "host:port" (IPv6 as "[::1]:port"); port in [1, 65535]. `what` names the variable for the message.
bool parseHostPort(const std::string& text, const std::string& what, std::string* host, int* port,
                   std::string* err);

// Slurm's compressed host list ("node[01-03,7],gpu5") expanded in order, at most `max` names.
bool expandHostList(const std::string& list, size_t max, std::vector<std::string>* out, std::string* err);

// The port a Slurm job step's coordinator uses (a hash of the job and step ids into [12000, 32000):
// below Linux's ephemeral range, so an outgoing connection never holds it).
int slurmPort(const std::string& jobId, const std::string& stepId);

// The token derived from a job's identity (launcher variables) and the optional AUTOCCL_COORD_SECRET:
// 64 hex digits of HMAC-SHA256(secret, identity).
std::string derivedToken(const std::string& secret, const std::string& identity);

}  // namespace autoccl::coord
