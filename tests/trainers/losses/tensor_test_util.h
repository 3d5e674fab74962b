// Helpers for the trainers/ tests: float64 tensors from nested initializer
// lists, and exact / near comparisons that print the tensors on failure.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <initializer_list>
#include <sstream>
#include <vector>

namespace rlid::trainers::testing {

inline torch::Tensor Vec(std::initializer_list<double> v) {
  return torch::tensor(std::vector<double>(v), torch::kFloat64);
}

inline torch::Tensor Mat(std::initializer_list<std::initializer_list<double>> rows) {
  std::vector<double> data;
  int64_t width = rows.size() ? static_cast<int64_t>(rows.begin()->size()) : 0;
  for (const auto& r : rows) data.insert(data.end(), r.begin(), r.end());
  return torch::tensor(data, torch::kFloat64).reshape({static_cast<int64_t>(rows.size()), width});
}

inline std::string Str(const torch::Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

// |a - b| <= tol elementwise, same shape.
inline ::testing::AssertionResult Near(const torch::Tensor& a, const torch::Tensor& b,
                                       double tol = 1e-12) {
  if (a.sizes() != b.sizes())
    return ::testing::AssertionFailure() << "shapes differ:\n" << Str(a) << "\nvs\n" << Str(b);
  double diff = (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
  if (diff <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "max |diff| " << diff << " > " << tol << "\n"
                                       << Str(a) << "\nvs\n"
                                       << Str(b);
}

// Bitwise-equal values (NaN never equal).
inline ::testing::AssertionResult Same(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.sizes() == b.sizes() && torch::equal(a, b)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << Str(a) << "\nvs\n" << Str(b);
}

}  // namespace rlid::trainers::testing
