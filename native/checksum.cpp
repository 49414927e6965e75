#include "checksum.h"

#include <cstring>

namespace lookup {

namespace {

constexpr uint64_t k_mul_a = 0x9FB21C651E98DF25ull;
constexpr uint64_t k_mul_b = 0xC2B2AE3D27D4EB4Full;

[[nodiscard]] inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

[[nodiscard]] inline uint64_t load64(const unsigned char* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
}

[[nodiscard]] inline uint64_t mix_lane(uint64_t lane, uint64_t word) {
    return rotl(lane + word * k_mul_b, 31) * k_mul_a;
}

[[nodiscard]] inline uint64_t avalanche(uint64_t h) {
    h ^= h >> 33;
    h *= k_mul_b;
    h ^= h >> 29;
    h *= k_mul_a;
    return h ^ (h >> 32);
}

}  // namespace

void Checksum::stripe(const unsigned char* p) {
    for (int i = 0; i < 4; ++i) m_lanes[i] = mix_lane(m_lanes[i], load64(p + 8 * i));
}

void Checksum::update(const void* data, size_t size) {
    const unsigned char* p = static_cast<const unsigned char*>(data);
    m_length += size;
    if (m_tail_size > 0) {
        const size_t take = size < 32 - m_tail_size ? size : 32 - m_tail_size;
        std::memcpy(m_tail + m_tail_size, p, take);
        m_tail_size += take;
        p += take;
        size -= take;
        if (m_tail_size < 32) return;
        stripe(m_tail);
        m_tail_size = 0;
    }
    for (; size >= 32; p += 32, size -= 32) stripe(p);
    std::memcpy(m_tail, p, size);
    m_tail_size = size;
}

uint64_t Checksum::digest() const {
    uint64_t h = rotl(m_lanes[0], 1) + rotl(m_lanes[1], 7) + rotl(m_lanes[2], 12) +
                 rotl(m_lanes[3], 18);
    h ^= m_length * k_mul_a;
    for (size_t i = 0; i < m_tail_size; ++i) h = rotl(h ^ (m_tail[i] * k_mul_b), 23) * k_mul_a;
    return avalanche(h);
}

uint64_t checksum(const void* data, size_t size) {
    Checksum c;
    c.update(data, size);
    return c.digest();
}

}  // namespace lookup
