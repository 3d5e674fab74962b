// core/utf8.h: Table 3-7 well-formedness, one byte per ill-formed unit, and
// AppendUtf8's U+FFFD for what has no UTF-8 form; hand-written cases first,
// then every lead/second-byte pair against the encoder.
#include "core/utf8.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rlid {
namespace {

std::string Encoded(uint32_t cp) {
  std::string out;
  AppendUtf8(cp, out);
  return out;
}

// {code_point, length, well_formed} of the unit at s[i], for EXPECT_EQ.
std::vector<uint32_t> At(std::string_view s, size_t i = 0) {
  const Utf8Scalar u = DecodeUtf8At(s, i);
  return {u.code_point, static_cast<uint32_t>(u.length), u.well_formed ? 1u : 0u};
}

const std::vector<uint32_t> kBad = {0xFFFD, 1, 0};

TEST(Utf8, DecodesWellFormedScalarsOfEachLength) {
  EXPECT_EQ(At(std::string_view("\0", 1)), (std::vector<uint32_t>{0, 1, 1}));
  EXPECT_EQ(At("A"), (std::vector<uint32_t>{0x41, 1, 1}));
  EXPECT_EQ(At("\x7F"), (std::vector<uint32_t>{0x7F, 1, 1}));
  EXPECT_EQ(At("\xC2\x80"), (std::vector<uint32_t>{0x80, 2, 1}));
  EXPECT_EQ(At("\xC3\xA9"), (std::vector<uint32_t>{0xE9, 2, 1}));  // é
  EXPECT_EQ(At("\xDF\xBF"), (std::vector<uint32_t>{0x7FF, 2, 1}));
  EXPECT_EQ(At("\xE0\xA0\x80"), (std::vector<uint32_t>{0x800, 3, 1}));
  EXPECT_EQ(At("\xE2\x82\xAC"), (std::vector<uint32_t>{0x20AC, 3, 1}));  // €
  EXPECT_EQ(At("\xED\x9F\xBF"), (std::vector<uint32_t>{0xD7FF, 3, 1}));  // below surrogates
  EXPECT_EQ(At("\xEE\x80\x80"), (std::vector<uint32_t>{0xE000, 3, 1}));  // above surrogates
  EXPECT_EQ(At("\xEF\xBF\xBF"), (std::vector<uint32_t>{0xFFFF, 3, 1}));
  EXPECT_EQ(At("\xF0\x90\x80\x80"), (std::vector<uint32_t>{0x10000, 4, 1}));
  EXPECT_EQ(At("\xF0\x9F\x98\x80"), (std::vector<uint32_t>{0x1F600, 4, 1}));  // 😀
  EXPECT_EQ(At("\xF4\x8F\xBF\xBF"), (std::vector<uint32_t>{0x10FFFF, 4, 1}));
  // At an offset, and only the unit there is read.
  EXPECT_EQ(At("a\xC3\xA9\xff", 1), (std::vector<uint32_t>{0xE9, 2, 1}));
}

TEST(Utf8, IllFormedInputIsOneByteOfUFFFD) {
  for (const char* bad : {
           "\xC0\xAF", "\xC1\xBF",                  // overlong 2-byte
           "\xE0\x80\xAF", "\xE0\x9F\xBF",          // overlong 3-byte
           "\xF0\x80\x80\xAF", "\xF0\x8F\xBF\xBF",  // overlong 4-byte
           "\xED\xA0\x80", "\xED\xBF\xBF",          // surrogates U+D800, U+DFFF
           "\xF4\x90\x80\x80", "\xF7\xBF\xBF\xBF",  // above U+10FFFF
           "\xF5\x80\x80\x80", "\xF8\x88\x80\x80\x80", "\xFE", "\xFF",
           "\x80", "\xBF",                          // lone continuation bytes
           "\xC3", "\xE2\x82", "\xF0\x9F\x98",      // truncated at the end
           "\xC3" "A", "\xE2\x82" "A", "\xF0\x9F\x98" "A",  // cut short by ASCII
           "\xE2\xC3\xA9", "\xF0\x9F\xC3\xA9",      // cut short by a new lead byte
       }) {
    SCOPED_TRACE(testing::PrintToString(std::string(bad)));
    EXPECT_EQ(At(bad), kBad);
    EXPECT_FALSE(IsValidUtf8(bad));
  }
  // Each ill-formed byte is its own unit, never the maximal subpart: after the
  // lead of a truncated sequence comes a lone continuation byte.
  EXPECT_EQ(At("\xE2\x82" "A", 1), kBad);
  EXPECT_EQ(At("\xE2\x82" "A", 2), (std::vector<uint32_t>{'A', 1, 1}));
  EXPECT_EQ(At("\xE2\xC3\xA9", 1), (std::vector<uint32_t>{0xE9, 2, 1}));
}

TEST(Utf8, IsValidUtf8) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8(std::string_view("a\0b", 3)));
  EXPECT_TRUE(IsValidUtf8("ascii \xC3\xA9 \xE6\x97\xA5 \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF"));
  EXPECT_FALSE(IsValidUtf8("valid so far \xC3\xA9 then \xFF"));
  EXPECT_FALSE(IsValidUtf8("\xC3\xA9\xA9"));  // one continuation byte too many
}

TEST(Utf8, NextUtf8Advances) {
  const std::string_view s = "a\xC3\xA9\xFF\xF0\x9F\x98\x80";
  size_t i = 0;
  std::vector<uint32_t> cps;
  while (i < s.size()) cps.push_back(NextUtf8(s, i));
  EXPECT_EQ(cps, (std::vector<uint32_t>{'a', 0xE9, 0xFFFD, 0x1F600}));
  EXPECT_EQ(i, s.size());
}

TEST(Utf8, AppendEncodesScalarsAndReplacesTheRest) {
  EXPECT_EQ(Encoded(0), std::string(1, '\0'));
  EXPECT_EQ(Encoded('A'), "A");
  EXPECT_EQ(Encoded(0x7F), "\x7F");
  EXPECT_EQ(Encoded(0x80), "\xC2\x80");
  EXPECT_EQ(Encoded(0x7FF), "\xDF\xBF");
  EXPECT_EQ(Encoded(0x800), "\xE0\xA0\x80");
  EXPECT_EQ(Encoded(0x20AC), "\xE2\x82\xAC");
  EXPECT_EQ(Encoded(0xFFFF), "\xEF\xBF\xBF");
  EXPECT_EQ(Encoded(0x10000), "\xF0\x90\x80\x80");
  EXPECT_EQ(Encoded(0x10FFFF), "\xF4\x8F\xBF\xBF");
  // No UTF-8 form: surrogates and values above U+10FFFF become U+FFFD.
  const std::string fffd = "\xEF\xBF\xBD";
  for (uint32_t cp : {0xD800u, 0xDBFFu, 0xDC00u, 0xDFFFu, 0x110000u, 0x7FFFFFFFu, 0xFFFFFFFFu})
    EXPECT_EQ(Encoded(cp), fffd) << std::hex << cp;
  std::string out = "x";
  AppendUtf8(0xE9, out);
  EXPECT_EQ(out, "x\xC3\xA9");  // appends, keeps what was there
}

TEST(Utf8, EveryScalarRoundTrips) {
  for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp == 0xD800) cp = 0xE000;
    const std::string s = Encoded(cp);
    const Utf8Scalar u = DecodeUtf8At(s, 0);
    ASSERT_TRUE(u.well_formed) << std::hex << cp;
    ASSERT_EQ(u.code_point, cp);
    ASSERT_EQ(static_cast<size_t>(u.length), s.size());
    // Every proper prefix is a truncated sequence.
    for (size_t k = 1; k < s.size(); ++k) ASSERT_FALSE(DecodeUtf8At(s.substr(0, k), 0).well_formed);
  }
}

TEST(Utf8, EveryLeadAndSecondByteAgreesWithTheEncoder) {
  // Table 3-7 constrains only the first two bytes beyond "80..BF"; follow each
  // pair with continuation bytes, ASCII or nothing. Whatever decodes must be a
  // scalar whose one UTF-8 form is the bytes read (no overlong, no surrogate).
  for (const char* tail : {"", "\x80\x80", "\xBF\xBF", "AA", "\x80" "A"}) {
    for (int b0 = 0; b0 < 256; ++b0) {
      for (int b1 = 0; b1 < 256; ++b1) {
        const std::string s = std::string{static_cast<char>(b0), static_cast<char>(b1)} + tail;
        const Utf8Scalar u = DecodeUtf8At(s, 0);
        if (!u.well_formed) {
          ASSERT_EQ(u.code_point, 0xFFFDu);
          ASSERT_EQ(u.length, 1);
          continue;
        }
        ASSERT_EQ(Encoded(u.code_point), s.substr(0, u.length)) << testing::PrintToString(s);
        ASSERT_FALSE(u.code_point >= 0xD800 && u.code_point <= 0xDFFF);
        ASSERT_LE(u.code_point, 0x10FFFFu);
      }
    }
  }
}

TEST(Utf8, LengthAndPrefixCountIllFormedBytesAsOneUnitEach) {
  EXPECT_EQ(Utf8Length(""), 0u);
  EXPECT_EQ(Utf8Length("abc"), 3u);
  EXPECT_EQ(Utf8Length("\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"), 3u);
  EXPECT_EQ(Utf8Length("a\x80"), 2u);
  EXPECT_EQ(Utf8Length("\xE2\x82"), 2u);
  EXPECT_EQ(Utf8Length("\xFF\xFF\xFF"), 3u);

  const std::string_view s = "a\xC3\xA9\xE2\x82\xAC\xFF\xF0\x9F\x98\x80";
  EXPECT_EQ(Utf8Prefix(s, 0), "");
  EXPECT_EQ(Utf8Prefix(s, 1), "a");
  EXPECT_EQ(Utf8Prefix(s, 2), "a\xC3\xA9");
  EXPECT_EQ(Utf8Prefix(s, 3), "a\xC3\xA9\xE2\x82\xAC");
  EXPECT_EQ(Utf8Prefix(s, 4), "a\xC3\xA9\xE2\x82\xAC\xFF");
  EXPECT_EQ(Utf8Prefix(s, 5), s);
  EXPECT_EQ(Utf8Prefix(s, 99), s);
  EXPECT_EQ(Utf8Prefix("\xE2\x82", 1), "\xE2");  // a truncated sequence is two units
  EXPECT_EQ(Utf8Prefix(s, 4).data(), s.data());  // a view, no copy
}

}  // namespace
}  // namespace rlid
