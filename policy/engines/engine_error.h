// A rollout engine failed to do its part: the vLLM server rlid owns could not
// start, died, or answered with an error or malformed data; an OpenAI-
// compatible server refused a request; a weight sync or its probe failed. The
// message names the engine and the request; the hint says what to check
// (often the server's log). Exit code 8.
#pragma once

#include "core/error.h"

namespace rlid {

class EngineError : public Error {
 public:
  using Error::Error;
  const char* kind() const override { return "engine error"; }
  int exit_code() const override { return 8; }
};

}  // namespace rlid
