// Shape checks, mask conversion and padding sanitation for trainers/.
#include "trainers/losses/tensor_checks.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace rlid::trainers {

std::string ShapeString(const torch::Tensor& t) {
  if (!t.defined()) return "undefined";
  return fmt::format("[{}]", fmt::join(t.sizes().vec(), ", "));
}

void RequireShape(std::string_view name, const torch::Tensor& t, const std::vector<int64_t>& shape,
                  std::string_view expectation) {
  if (t.defined() && t.sizes().vec() == shape) return;
  throw ConfigError(
      fmt::format("{} has shape {}, expected [{}]{}", name, ShapeString(t), fmt::join(shape, ", "),
                  expectation.empty() ? "" : fmt::format(" ({})", expectation)),
      "every [B,T] input must have the shape of log_prob / response_mask");
}

void RequireSameShape(std::string_view name, const torch::Tensor& t, std::string_view ref_name,
                      const torch::Tensor& ref) {
  RequireShape(name, t, ref.sizes().vec(), fmt::format("the shape of {}", ref_name));
}

torch::Tensor BoolMask(std::string_view name, const torch::Tensor& mask, const torch::Tensor& like) {
  if (!mask.defined()) return torch::ones(like.sizes(), like.options().dtype(torch::kBool));
  RequireShape(name, mask, like.sizes().vec(), "");
  if (mask.scalar_type() == torch::kBool) return mask;
  torch::Tensor as_double = mask.to(torch::kFloat64);
  bool binary = ((as_double == 0) | (as_double == 1)).all().item<bool>();
  if (!binary)
    throw ConfigError(fmt::format("{} must hold only 0/1 (or booleans)", name),
                      "1 marks a valid token, 0 a padded one");
  return as_double != 0;
}

torch::Tensor PadRows(const std::vector<const std::vector<float>*>& rows, int64_t T, double pad) {
  auto out = torch::full({static_cast<int64_t>(rows.size()), T}, pad, torch::kFloat64);
  auto a = out.accessor<double, 2>();
  for (size_t i = 0; i < rows.size(); ++i)
    for (size_t t = 0; t < rows[i]->size() && static_cast<int64_t>(t) < T; ++t)
      a[i][t] = (*rows[i])[t];
  return out;
}

torch::Tensor Clean(const torch::Tensor& x, const torch::Tensor& mask) {
  return torch::where(mask, x, torch::zeros_like(x));
}

}  // namespace rlid::trainers
