#include "autoccl/common/plan.h"

namespace autoccl {

const char* phaseName(Phase p) {
  switch (p) {
    case Phase::kTuning: return "tuning";
    case Phase::kPinned: return "pinned";
    case Phase::kCheck: return "check";
    case Phase::kFinal: return "final";
  }
  return "?";
}

}  // namespace autoccl
