// Token ids shared by the tokenizer, the readout and the sampler.
#pragma once

#include <cstdint>

namespace rlid::policy { using TokenId = int32_t; }
