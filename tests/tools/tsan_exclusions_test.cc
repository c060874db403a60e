// tools/tsan_excluded.txt, the tests `make tsan` leaves out, stays honest: every entry gives
// its reason and names tests that exist in this build (a renamed or deleted test cannot leave a
// stale pattern behind, nor a pattern quietly exclude more than it says), the list stays a
// small part of the suite, and tools/tsan_excluded.sh turns it into the ctest -E expression
// that excludes exactly those tests.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string run(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  std::array<char, 4096> buffer;
  std::size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) out.append(buffer.data(), n);
  ::pclose(pipe);
  return out;
}

// Every test of this build, by its ctest name.
std::vector<std::string> suite() {
  const std::string listing =
      run(std::string("cd '") + LIBAI_BINARY_DIR + "' && '" + LIBAI_CTEST + "' -N 2>/dev/null");
  std::vector<std::string> names;
  const std::regex line(R"(Test +#[0-9]+: (\S+))");
  for (std::sregex_iterator it(listing.begin(), listing.end(), line), end; it != end; ++it)
    names.push_back((*it)[1]);
  return names;
}

struct Entry {
  int line = 0;
  std::string pattern, reason;
};

std::vector<Entry> entries() {
  std::ifstream in(std::string(LIBAI_SOURCE_DIR) + "/tools/tsan_excluded.txt");
  std::vector<Entry> out;
  std::string text;
  for (int number = 1; std::getline(in, text); ++number) {
    const auto first = text.find_first_not_of(" \t");
    if (first == std::string::npos || text[first] == '#') continue;
    std::istringstream words(text);
    Entry e{number, "", ""};
    words >> e.pattern;
    std::getline(words >> std::ws, e.reason);
    out.push_back(e);
  }
  return out;
}

int matches(const std::regex& re, const std::vector<std::string>& names) {
  int n = 0;
  for (const auto& name : names) n += std::regex_match(name, re);
  return n;
}

TEST(TsanExclusions, EveryEntryGivesItsReasonAndNamesTestsThatExist) {
  const std::vector<std::string> names = suite();
  ASSERT_GT(names.size(), 100u) << "ctest -N listed too few tests in " << LIBAI_BINARY_DIR;
  int excluded = 0;
  for (const Entry& e : entries()) {
    SCOPED_TRACE("tools/tsan_excluded.txt:" + std::to_string(e.line) + ": " + e.pattern);
    EXPECT_GE(e.reason.size(), 20u) << "an exclusion needs its reason, in words";
    const int n = matches(std::regex(e.pattern), names);
    EXPECT_GE(n, 1) << "names no test of this build";
    EXPECT_LE(n, 10) << "excludes more than a handful of tests: name them";
    excluded += n;
  }
  EXPECT_LE(excluded * 20, int(names.size())) << "more than 5% of the suite left out of make tsan";
}

TEST(TsanExclusions, TheScriptExcludesExactlyTheListedTests) {
  const std::vector<std::string> names = suite();
  std::string expression = run(std::string("'") + LIBAI_SOURCE_DIR + "/tools/tsan_excluded.sh'");
  while (!expression.empty() && expression.back() == '\n') expression.pop_back();
  ASSERT_FALSE(expression.empty()) << "an empty -E would exclude every test";
  const std::regex script(expression, std::regex::extended);
  for (const auto& name : names) {
    bool listed = false;
    for (const Entry& e : entries())
      listed = listed || std::regex_match(name, std::regex(e.pattern));
    EXPECT_EQ(std::regex_search(name, script), listed) << name;
  }
}

}  // namespace
