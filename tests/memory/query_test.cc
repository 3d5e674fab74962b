// Result formatting for `rlid sql`: golden table, CSV and JSON texts.
#include "memory/query.h"

#include <gtest/gtest.h>

namespace rlid::memory {
namespace {

QueryResult Sample() {
  QueryResult r;
  r.columns = {"id", "label", "p", "note"};
  r.rows.push_back({int64_t{1}, std::string("A"), 0.123456789, std::monostate{}});
  r.rows.push_back({int64_t{12}, std::string("BB"), 1.0, std::string("two\nlines, \"quoted\"")});
  r.rows.push_back({int64_t{-3}, std::string("é"), -2.5e-7, Blob{std::string("\x01\xff", 2)}});
  return r;
}

TEST(QueryFormat, Table) {
  EXPECT_EQ(FormatTable(Sample()),
            "id  label         p  note\n"
            "--  -----  --------  --------------------\n"
            " 1  A      0.123457  NULL\n"
            "12  BB            1  two\\nlines, \"quoted\"\n"
            "-3  é      -2.5e-07  x'01ff'\n"
            "(3 rows)\n");
  // Long cells are cut to max_width characters (UTF-8 aware).
  QueryResult w;
  w.columns = {"text"};
  w.rows.push_back({std::string("ééééééééééé")});
  EXPECT_EQ(FormatTable(w, 8), "text\n--------\nééééé...\n(1 row)\n");
  EXPECT_EQ(FormatTable(w, 0), "text\n-----------\nééééééééééé\n(1 row)\n");
}

TEST(QueryFormat, Csv) {
  EXPECT_EQ(FormatCsv(Sample()),
            "id,label,p,note\n"
            "1,A,0.123456789,\n"
            "12,BB,1,\"two\nlines, \"\"quoted\"\"\"\n"
            "-3,é,-2.5e-07,x'01ff'\n");
}

TEST(QueryFormat, Json) {
  EXPECT_EQ(FormatJson(Sample()),
            "[\n"
            "  {\n    \"id\": 1,\n    \"label\": \"A\",\n    \"p\": 0.123456789,\n    \"note\": "
            "null\n  },\n"
            "  {\n    \"id\": 12,\n    \"label\": \"BB\",\n    \"p\": 1.0,\n"
            "    \"note\": \"two\\nlines, \\\"quoted\\\"\"\n  },\n"
            "  {\n    \"id\": -3,\n    \"label\": \"é\",\n    \"p\": -2.5e-07,\n    \"note\": "
            "\"01ff\"\n  }\n"
            "]\n");
  QueryResult empty;
  empty.columns = {"x"};
  EXPECT_EQ(FormatJson(empty), "[]\n");
  EXPECT_EQ(FormatCsv(empty), "x\n");
  EXPECT_EQ(FormatTable(empty), "x\n-\n(0 rows)\n");
}

}  // namespace
}  // namespace rlid::memory
