// "Did you mean" suggestions for misspelled keys and names.
//
//   std::string hint = did_you_mean("tensor_paralel_size", {"tensor_parallel_size", "seed"});
//   // hint == " (did you mean 'tensor_parallel_size'?)", or "" when nothing is close
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace libai::config {

// Levenshtein distance (insertions, deletions, substitutions each cost one).
std::size_t edit_distance(std::string_view a, std::string_view b);

// The closest candidate within a distance that grows with the length of `word` (a third of
// it, at least 2), or "" when none is close enough to be a plausible typo.
std::string closest(std::string_view word, const std::vector<std::string>& candidates);

// " (did you mean 'x'?)" or "".
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

// "a, b, c" for messages that list what is known.
std::string join_names(const std::vector<std::string>& names);

}  // namespace libai::config
