// Training text for rlid's own tokenizers: what an agent reads in an env
// (instructions, observations, menu lines, realisations, afterstates), taken
// from seeded random play over train-split seeds. Feeds Tokenizer::Train.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rlid::envs {
class Env;
}

namespace rlid::policy {

struct EnvCorpusOptions {
  int episodes = 200;  // train seeds 0, 2, 4, ... (envs::SplitSeed(kTrain, i))
  uint64_t seed = 0;   // seeds the random play (stream "tokenizer_corpus", episode index)
};

// One document per episode: the instructions, then for every step the
// observation, the menu as "  A) command" lines, every realisation and every
// afterstate; the final observation closes the episode.
std::vector<std::string> EnvTextCorpus(const envs::Env& env, const EnvCorpusOptions& opt);

}  // namespace rlid::policy
