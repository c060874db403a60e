// CRC-32C (Castagnoli), the checksum of TFRecord framing (TensorBoard event files).
//
//   uint32_t c = train::crc32c("123456789");   // 0xE3069283
//   uint32_t m = train::masked_crc32c(bytes);  // what a TFRecord stores
//
// Reflected polynomial 0x82F63B78, initial value and final xor 0xFFFFFFFF, table-driven (the
// event files are a few KB per logging period; a table is plenty).
#pragma once

#include <cstdint>
#include <string_view>

namespace libai::train {

uint32_t crc32c(std::string_view bytes);

// TFRecord's masking, so that a CRC stored next to the data it covers is not itself a
// plausible CRC: rotate right by 15, add 0xA282EAD8.
uint32_t mask_crc32c(uint32_t crc);
inline uint32_t masked_crc32c(std::string_view bytes) { return mask_crc32c(crc32c(bytes)); }

}  // namespace libai::train
