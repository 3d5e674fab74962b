// The first stage of Template::Parse: the reference's preprocessing of the template text
// (lstrip_blocks, trim_blocks, the transformers `generation` tag) before the lexer sees it,
// keeping for every byte the offset it came from so errors point at the author's source.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rlid::jinja::internal {

// Preprocessed template text; origin[i] is the offset in the original source of text[i], so
// errors name the line and column the author wrote.
struct Mapped {
  std::string text;
  std::vector<uint32_t> origin;
  void Push(char c, uint32_t at) {
    text += c;
    origin.push_back(at);
  }
  void Copy(const Mapped& from, size_t begin, size_t end) {
    text.append(from.text, begin, end - begin);
    origin.insert(origin.end(), from.origin.begin() + begin, from.origin.begin() + end);
  }
};

// The text the lexer reads: `source` without a single trailing newline, then lstrip_blocks,
// trim_blocks and the generation tags applied as the reference does.
Mapped Preprocess(std::string_view source);

}  // namespace rlid::jinja::internal
