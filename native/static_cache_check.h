// The whole-file check of a static cache (its checksum and every invariant the drafter relies
// on), made in forward passes over each section, so the same check runs over a mapped copy
// and over the file itself through bounded buffers, before a byte of it is copied anywhere: a
// file of holes behind a plausible header (gigabytes that take no disk) is refused having
// written nothing and holding a few MiB.
#pragma once

#include "file_bytes.h"
#include "static_cache_format.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace lookup {

// One section read front to back from memory the caller keeps alive.
template <class T>
class MemoryCursor {
public:
    explicit MemoryCursor(const unsigned char* start) : m_next(start) {}
    T next() {
        T value;
        std::memcpy(&value, m_next, sizeof value);
        m_next += sizeof value;
        return value;
    }
    [[nodiscard]] bool failed() const { return false; }

private:
    const unsigned char* m_next;
};

// One section read front to back from a file, k_check_chunk bytes at a time. A read that
// fails (the file shrank) yields zeros from then on and failed() tells.
inline constexpr size_t k_check_chunk = size_t{1} << 20;

template <class T>
class FileCursor {
public:
    FileCursor(const ReadableFile& file, uint64_t offset, uint64_t end)
        : m_file(file), m_offset(offset), m_end(end), m_buffer(k_check_chunk - k_check_chunk % sizeof(T)) {}
    T next() {
        if (m_at == m_filled && !refill()) return T{};
        T value;
        std::memcpy(&value, m_buffer.data() + m_at, sizeof value);
        m_at += sizeof value;
        return value;
    }
    [[nodiscard]] bool failed() const { return !m_error.empty(); }
    [[nodiscard]] const std::string& error() const { return m_error; }

private:
    bool refill() {
        const uint64_t left = m_end - m_offset;
        const size_t n = static_cast<size_t>(std::min<uint64_t>(m_buffer.size(), left));
        if (n < sizeof(T)) {
            m_error = "read past its section";
            return false;
        }
        if (!m_file.read_at(m_offset, m_buffer.data(), n, &m_error)) {
            if (m_error.empty()) m_error = "truncated while being read";
            return false;
        }
        m_offset += n;
        m_at = 0;
        m_filled = n;
        return true;
    }

    const ReadableFile& m_file;
    uint64_t m_offset;
    uint64_t m_end;
    std::vector<unsigned char> m_buffer;
    size_t m_at = 0;
    size_t m_filled = 0;
    std::string m_error;
};

// "" when the sections hold what the header says, else the first problem found. The bucket
// bounds are read first, whole, so every record index read after them is under n_keys; then
// each bucket's records, each record's span against the followers. `bounds` and `buckets`
// both read the bucket section (one pass each).
template <class Buckets, class Records, class Followers>
[[nodiscard]] std::string structure_error(const StaticHeader& h, Buckets& bounds, Buckets& buckets, Records& records,
                                          Followers& followers) {
    const int bucket_bits = static_layout(h.n_keys, h.n_followers).bucket_bits;
    uint32_t previous = bounds.next();
    if (previous != 0) return "corrupt (bucket bounds)";
    for (uint64_t b = 0; b < h.n_buckets; ++b) {
        const uint32_t bound = bounds.next();
        if (bound < previous) return "corrupt (buckets out of order)";
        previous = bound;
    }
    if (previous != h.n_keys) return "corrupt (bucket bounds)";
    uint64_t next_offset = 0;
    uint64_t total = 0;
    uint64_t i = buckets.next();
    uint64_t previous_pair = 0;
    for (uint64_t b = 0; b < h.n_buckets; ++b) {
        const uint64_t bucket_end = buckets.next();
        for (const uint64_t first = i; i < bucket_end; ++i) {
            const StaticRecord r = records.next();
            const uint64_t pair = r.key & k_pair_mask;
            const auto t0 = static_cast<uint32_t>(pair_token(r.key, 0));
            const auto t1 = static_cast<uint32_t>(pair_token(r.key, 1));
            const bool key_ok = t0 < h.n_vocab && t1 < h.n_vocab && bucket_of(r.key, bucket_bits) == b &&
                                (i == first || previous_pair < pair);
            const uint64_t offset = r.span & k_span_offset_mask, length = r.span >> k_span_offset_bits;
            if (!key_ok || offset != next_offset || length == 0 || length > h.n_followers - offset) {
                return "corrupt (record " + std::to_string(i) + ")";
            }
            StaticFallback fallback;
            token_t previous_token = -1;
            for (uint64_t f = 0; f < length; ++f) {
                const Follower fw = followers.next();
                if (fw.token < 0 || static_cast<uint32_t>(fw.token) >= h.n_vocab || fw.count == 0 ||
                    (f > 0 && previous_token >= fw.token)) {
                    return "corrupt (follower " + std::to_string(offset + f) + ")";
                }
                previous_token = fw.token;
                fallback.add(fw.token, fw.count);
                total += fw.count;
            }
            if (record_fallback(r.key) != fallback.decision()) {
                return "corrupt (record " + std::to_string(i) + " drafting decision)";
            }
            previous_pair = pair;
            next_offset = offset + length;
        }
    }
    if (next_offset != h.n_followers || total != h.total_count) return "corrupt (follower totals)";
    return {};
}

// The whole check of bytes in memory that begin with the header h: checksum, then structure.
[[nodiscard]] std::string memory_check_error(const StaticHeader& h, const unsigned char* data);

// The same check of the file itself, read through bounded buffers (structure first: a file
// that is mostly holes fails at its first record or follower). `file` holds h at offset 0.
[[nodiscard]] std::string file_check_error(const StaticHeader& h, const ReadableFile& file);

}  // namespace lookup
