// Tests for policy/safetensors_header: the torch-free validation of a
// safetensors JSON header (built into rlid_tests_base, so it also runs under
// ASan+UBSan). Each rejected header names the file and what is wrong.
#include "policy/model/safetensors_header.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace rlid::policy {
namespace {

// The IoError message for `header` over `data_size` bytes, or "" if accepted.
std::string ErrorOf(const std::string& header, uint64_t data_size) {
  try {
    ParseSafetensorsHeader(header, data_size, "m.safetensors");
  } catch (const IoError& e) {
    return e.what();
  }
  return "";
}

TEST(SafetensorsHeader, ParsesEntriesAndMetadata) {
  const ParsedSafetensorsHeader h = ParseSafetensorsHeader(
      R"({"__metadata__":{"format":"pt"},)"
      R"("w":{"dtype":"BF16","shape":[2,3],"data_offsets":[8,20]},)"
      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("s":{"dtype":"I64","shape":[],"data_offsets":[20,28]},)"
      R"("e":{"dtype":"BOOL","shape":[0,5],"data_offsets":[28,28]}})",
      28, "m.safetensors");
  ASSERT_EQ(h.entries.size(), 4u);
  EXPECT_EQ(h.metadata.at("format"), "pt");
  const SafetensorsHeaderEntry& w = h.entries.at("w");
  EXPECT_EQ(w.dtype_name, "BF16");
  EXPECT_EQ(w.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w.begin, 8u);
  EXPECT_EQ(w.end, 20u);
  EXPECT_EQ(h.entries.at("s").shape.size(), 0u);  // a scalar: one element
  EXPECT_EQ(h.entries.at("e").end - h.entries.at("e").begin, 0u);
  EXPECT_TRUE(ParseSafetensorsHeader("{}", 0, "m").entries.empty());
}

TEST(SafetensorsHeader, DtypeSizes) {
  EXPECT_EQ(SafetensorsDtypeBytes("F32"), 4u);
  EXPECT_EQ(SafetensorsDtypeBytes("BF16"), 2u);
  EXPECT_EQ(SafetensorsDtypeBytes("I64"), 8u);
  EXPECT_EQ(SafetensorsDtypeBytes("BOOL"), 1u);
  EXPECT_EQ(SafetensorsDtypeBytes("f32"), 0u);
  EXPECT_EQ(SafetensorsDtypeBytes("Q4"), 0u);
}

TEST(SafetensorsHeader, RejectsDamagedHeaders) {
  EXPECT_NE(ErrorOf("{\"a\":", 0).find("'m.safetensors': corrupt safetensors header"),
            std::string::npos);
  EXPECT_EQ(ErrorOf("[1, 2]", 0), "'m.safetensors': header is not a JSON object");
  EXPECT_EQ(ErrorOf(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8),
            "'m.safetensors': tensor 'a' has unsupported dtype 'Q4'");
  EXPECT_EQ(ErrorOf(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
            "'m.safetensors': tensor 'a' has a negative dimension");
  const std::string disagree = "'m.safetensors': tensor 'a' has data_offsets";
  // Past the data section, a length that disagrees with the shape, reversed
  // offsets, an offset that would wrap, a numel x size that overflows, three offsets.
  for (const char* h : {
           R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
           R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
           R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})",
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551612,4]}})",
           R"({"a":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,8]}})",
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}})",
       })
    EXPECT_EQ(ErrorOf(h, 8).substr(0, disagree.size()), disagree) << h;
  EXPECT_EQ(ErrorOf(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                    16),
            "'m.safetensors': two tensors' data ranges overlap");
  // Missing fields and wrong JSON types name the entry.
  for (const char* h : {
           R"({"a":{"shape":[2],"data_offsets":[0,8]}})",
           R"({"a":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})",
           R"({"a":{"dtype":"F32","shape":[2]}})",
           R"({"a":[1]})",
           R"({"__metadata__":{"k":1}})",
       })
    EXPECT_NE(ErrorOf(h, 8).find("'m.safetensors': bad header entry '"), std::string::npos) << h;
}

// Found by fuzz/safetensors_header_fuzz: shapes and offsets went through
// nlohmann's get<int64_t>/get<uint64_t>, which truncate 1.5 to 1, wrap -8 to
// 2^64 - 8 and convert a float beyond 2^64 with undefined behaviour.
TEST(SafetensorsHeader, ShapesAndOffsetsMustBeJsonIntegers) {
  EXPECT_EQ(ErrorOf(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 8),
            "'m.safetensors': tensor 'a' has shape [1.5], not a list of integers");
  EXPECT_EQ(ErrorOf(R"({"a":{"dtype":"F32","shape":[1e300],"data_offsets":[0,4]}})", 8),
            "'m.safetensors': tensor 'a' has shape [1e+300], not a list of integers");
  EXPECT_EQ(ErrorOf(R"({"a":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", 8),
            "'m.safetensors': tensor 'a' has shape \"2\", not a list of integers");
  EXPECT_EQ(ErrorOf(R"({"a":{"dtype":"U8","shape":[true],"data_offsets":[0,1]}})", 8),
            "'m.safetensors': tensor 'a' has shape [true], not a list of integers");
  EXPECT_EQ(ErrorOf(R"({"a":{"dtype":"BOOL","shape":[9223372036854775808],"data_offsets":[0,1]}})",
                    8),
            "'m.safetensors': tensor 'a' has a dimension 9223372036854775808 beyond int64");
  const std::string disagree = "'m.safetensors': tensor 'a' has data_offsets";
  for (const char* h : {
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[18446744873709551612,4]}})",
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8.0]}})",
           R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[-1,-1]}})",
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":"0,8"}})",
       })
    EXPECT_EQ(ErrorOf(h, ~uint64_t{0}).substr(0, disagree.size()), disagree) << h;
}

}  // namespace
}  // namespace rlid::policy
