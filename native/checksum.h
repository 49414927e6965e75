// A fast 64-bit checksum for cache files (not cryptographic: it catches corruption, not forgery).
#pragma once

#include <cstddef>
#include <cstdint>

namespace lookup {

// Four independent multiply-rotate lanes over 32-byte stripes, so the CPU overlaps the
// multiplications; the tail and the length are folded in at the end. Streams at several GB/s.
class Checksum {
public:
    void update(const void* data, size_t size);
    [[nodiscard]] uint64_t digest() const;

private:
    void stripe(const unsigned char* p);

    uint64_t m_lanes[4] = {0x243F6A8885A308D3ull, 0x13198A2E03707344ull, 0xA4093822299F31D0ull,
                           0x082EFA98EC4E6C89ull};
    unsigned char m_tail[32] = {};
    size_t m_tail_size = 0;
    uint64_t m_length = 0;
};

[[nodiscard]] uint64_t checksum(const void* data, size_t size);

}  // namespace lookup
