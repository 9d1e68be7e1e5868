// rn50 core: CRC-32C (Castagnoli polynomial 0x1EDC6F41, reflected 0x82F63B78), the checksum of
// TFRecord framing (data/tfrecord.h) and of the files rn50 writes and later reads back
// (checkpoints, exported models: core/safetensors.h FileDigest).
#pragma once

#include <cstddef>
#include <cstdint>

namespace rn50 {

/// CRC-32C of `n` bytes at `data`, continuing `crc` (0 to start; crc32c(b, crc32c(a)) is the
/// CRC of a followed by b). SSE4.2's crc32 instruction where the CPU has it, else a byte table;
/// both give the check value 0xE3069283 for "123456789" (RFC 3720 B.4).
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

}  // namespace rn50
