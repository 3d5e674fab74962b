// Small tensor helpers shared by the loss and advantage functions: shape checks
// that throw ConfigError naming the tensors and their shapes, mask conversion
// with 0/1 validation, and sanitising padded positions so junk there (huge
// numbers, inf, nan) can reach neither a value nor a gradient.
#pragma once

#include <torch/torch.h>

#include <string>
#include <string_view>
#include <vector>

namespace rlid::trainers {

// "[2, 5]" (or "undefined").
std::string ShapeString(const torch::Tensor& t);

// Throws ConfigError unless `t` is defined with exactly `shape`.
void RequireShape(std::string_view name, const torch::Tensor& t, const std::vector<int64_t>& shape,
                  std::string_view expectation);
// Throws ConfigError unless `t` is defined and has the shape of `ref`.
void RequireSameShape(std::string_view name, const torch::Tensor& t, std::string_view ref_name,
                      const torch::Tensor& ref);

// A bool mask of the shape of `like` (and on its device) from a bool /
// integer / float tensor whose entries are 0 or 1 (ConfigError otherwise);
// undefined -> all true.
torch::Tensor BoolMask(std::string_view name, const torch::Tensor& mask, const torch::Tensor& like);

// x where mask, 0 elsewhere (gradient 0 at padded positions).
torch::Tensor Clean(const torch::Tensor& x, const torch::Tensor& mask);

// Per-sample float rows (responses' token log-probs, menus' item values) as one
// [B, T] float64 tensor on the CPU: row i's first min(size, T) entries, `pad`
// after them. Filled through an accessor, not element by element.
torch::Tensor PadRows(const std::vector<const std::vector<float>*>& rows, int64_t T,
                      double pad = 0.0);

}  // namespace rlid::trainers
