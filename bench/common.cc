// Helpers shared by the benchmarks (bench/bench.h).
#include <sys/resource.h>

#include "bench/bench.h"
#include "envs/env.h"
#include "policy/tokenizer_corpus.h"

namespace rlid::bench {

double PeakRssBytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0;  // ru_maxrss is in KiB on Linux
}

policy::Tokenizer SmallEnvTokenizer(const envs::Env& env) {
  policy::EnvCorpusOptions co;
  co.episodes = 100;
  policy::TokenizerTrainOptions to;
  to.vocab_size = 512;
  return policy::Tokenizer::Train(policy::EnvTextCorpus(env, co), to);
}

}  // namespace rlid::bench
