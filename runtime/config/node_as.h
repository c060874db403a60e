// Node::as<T>() conversions; included by node.h only.
//
//   int tp = node.as<int>();
//   std::optional<int> gbs = node.as<std::optional<int>>();   // null -> nullopt
//   std::vector<int> stage_ids = node.as<std::vector<int>>();
#pragma once

#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/error.h"

namespace libai::config {

namespace detail {

template <typename T>
struct is_vector : std::false_type {};
template <typename T>
struct is_vector<std::vector<T>> : std::true_type {};
template <typename T>
struct is_optional : std::false_type {};
template <typename T>
struct is_optional<std::optional<T>> : std::true_type {};

}  // namespace detail

template <typename T>
T Node::as() const {
  if constexpr (std::is_same_v<T, bool>) {
    return as_bool();
  } else if constexpr (std::is_integral_v<T>) {
    const int64_t value = as_int();
    // Narrowing silently would turn a typo like 1e12 into a wrong, plausible number.
    LIBAI_CHECK(std::in_range<T>(value), describe(), ": value ", value,
                " does not fit the expected integer type");
    return static_cast<T>(value);
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(as_float());
  } else if constexpr (std::is_same_v<T, std::string>) {
    return as_string();
  } else if constexpr (detail::is_optional<T>::value) {
    if (is_null()) return std::nullopt;
    return as<typename T::value_type>();
  } else if constexpr (detail::is_vector<T>::value) {
    T out;
    for (const Node& item : items()) out.push_back(item.as<typename T::value_type>());
    return out;
  } else {
    static_assert(sizeof(T) == 0, "Node::as<T>: unsupported type");
  }
}

}  // namespace libai::config
