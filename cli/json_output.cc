// DumpJson, HexBytes, TextWithBytes (see json_output.h).
#include "cli/json_output.h"

namespace rlid::cli {

std::string DumpJson(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

std::string HexBytes(std::string_view text) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * text.size());
  for (unsigned char c : text) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

void TextWithBytes(nlohmann::json& j, const std::string& key, std::string_view text) {
  j[key] = std::string(text);
  j[key + "_hex"] = HexBytes(text);
}

}  // namespace rlid::cli
