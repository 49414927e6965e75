#include "static_cache.h"

#include "checksum.h"

#include <cstddef>
#include <cstring>

namespace lookup {

namespace {

// Is [offset, offset + count * item) inside a file of `size` bytes, without overflow?
[[nodiscard]] bool section_fits(uint64_t offset, uint64_t count, uint64_t item, uint64_t size) {
    if (offset > size || offset % 8 != 0) return false;
    return count <= (size - offset) / item;
}

[[nodiscard]] std::string describe_header_error(const StaticHeader& h, uint64_t size) {
    if (std::memcmp(h.magic, k_static_magic, sizeof h.magic) != 0) {
        return "not a lookahead-lsp static cache (bad magic)";
    }
    if (h.byte_order_mark != k_byte_order_mark) return "written on a machine of other endianness";
    if (h.format_version != k_static_format_version) {
        return "format version " + std::to_string(h.format_version) + ", this build reads version " +
               std::to_string(k_static_format_version) + " (rebuild it with build-cache)";
    }
    if (h.file_size != size) {
        return h.file_size > size ? "truncated (" + std::to_string(size) + " of " +
                                        std::to_string(h.file_size) + " bytes)"
                                  : "corrupt (trailing bytes after the last section)";
    }
    if (h.ngram_order != k_static_ngram) return "corrupt header (n-gram order is not 2)";
    if (h.n_vocab == 0 || h.n_vocab > k_static_max_vocab) return "corrupt header (vocabulary size)";
    if (h.n_buckets == 0 || (h.n_buckets & (h.n_buckets - 1)) != 0 || h.n_buckets > (uint64_t{1} << 32)) {
        return "corrupt header (bucket count)";
    }
    if (h.n_keys > 0xFFFFFFFFull || h.n_followers > k_span_offset_mask || h.n_keys > h.n_followers) {
        return "corrupt header (key or follower count)";
    }
    const bool sections_ok = h.buckets_offset >= sizeof(StaticHeader) &&
                             section_fits(h.buckets_offset, h.n_buckets + 1, 4, size) &&
                             h.records_offset >= h.buckets_offset + (h.n_buckets + 1) * 4 &&
                             section_fits(h.records_offset, h.n_keys, sizeof(StaticRecord), size) &&
                             h.followers_offset >= h.records_offset + h.n_keys * sizeof(StaticRecord) &&
                             section_fits(h.followers_offset, h.n_followers, sizeof(Follower), size);
    if (!sections_ok) return "corrupt header (section offsets)";
    return {};
}

}  // namespace

bool StaticCache::open(const std::string& path, std::optional<uint32_t> expected_vocab,
                       std::optional<uint64_t> expected_fingerprint, std::string* error) {
    close();
    std::string reason;
    if (!m_file.read(path, &reason)) {
        *error = "cannot open (" + reason + ")";
        return false;
    }
    if (m_file.size() < sizeof(StaticHeader)) {
        *error = m_file.size() == 0 ? "empty file, not a static cache" : "truncated (no complete header)";
        m_file.close();
        return false;
    }
    StaticHeader h;
    std::memcpy(&h, m_file.data(), sizeof h);
    reason = describe_header_error(h, m_file.size());
    if (reason.empty() && expected_vocab && h.n_vocab != *expected_vocab) {
        reason = "built for a vocabulary of " + std::to_string(h.n_vocab) + " tokens, the model has " +
                 std::to_string(*expected_vocab);
    }
    if (reason.empty() && expected_fingerprint && h.tokenizer_fingerprint != *expected_fingerprint) {
        reason = "built with another tokenizer than the model's (rebuild it with build-cache)";
    }
    if (!reason.empty()) {
        *error = reason;
        m_file.close();
        return false;
    }
    m_path = path;
    m_header = h;
    m_open = true;
    // The copy is page-aligned, so every section offset (a multiple of 8) is aligned.
    m_buckets = reinterpret_cast<const uint32_t*>(m_file.data() + h.buckets_offset);
    m_records = reinterpret_cast<const StaticRecord*>(m_file.data() + h.records_offset);
    m_followers = reinterpret_cast<const Follower*>(m_file.data() + h.followers_offset);
    m_bucket_bits = 0;
    while ((uint64_t{1} << m_bucket_bits) < h.n_buckets) ++m_bucket_bits;
    return true;
}

void StaticCache::close() {
    m_file.close();
    m_path.clear();
    m_header = {};
    m_open = false;
    m_buckets = nullptr;
    m_records = nullptr;
    m_followers = nullptr;
    m_verified = false;
}

bool StaticCache::changed_on_disk() const {
    FileIdentity now;
    return !identity_at(m_path, &now) || now != m_file.identity();
}

FollowerSpan StaticCache::span_at(uint64_t span) const {
    const uint64_t offset = span & k_span_offset_mask;
    const uint64_t length = span >> k_span_offset_bits;
    if (offset > m_header.n_followers || length > m_header.n_followers - offset) return {};
    return {m_followers + offset, static_cast<uint32_t>(length), 0, 0};
}

StaticCache::Entry StaticCache::find(token_t t0, token_t t1) const {
    const uint64_t pair = pack_pair(t0, t1);
    const uint64_t bucket = bucket_of(pair, m_bucket_bits);
    const uint64_t first = m_buckets[bucket];
    const uint64_t last = m_buckets[bucket + 1];
    if (first > last || last > m_header.n_keys) return {};
    for (uint64_t i = first; i < last; ++i) {
        const StaticRecord& r = m_records[i];
        if ((r.key & k_pair_mask) == pair) return {span_at(r.span), record_fallback(r.key)};
    }
    return {};
}

bool StaticCache::verify(std::string* error) {
    const StaticHeader& h = m_header;
    Checksum sum;
    StaticHeader zeroed = h;
    zeroed.checksum = 0;
    sum.update(&zeroed, sizeof zeroed);
    sum.update(m_file.data() + sizeof zeroed, m_file.size() - sizeof zeroed);
    if (sum.digest() != h.checksum) {
        *error = "corrupt (checksum mismatch)";
        return false;
    }
    // The checksum passed, so what follows only fails for a file that a buggy or hostile writer
    // produced with a valid checksum; check every invariant the drafter relies on anyway.
    if (m_buckets[0] != 0 || m_buckets[h.n_buckets] != h.n_keys) {
        *error = "corrupt (bucket bounds)";
        return false;
    }
    uint64_t next_offset = 0;
    uint64_t total = 0;
    for (uint64_t b = 0; b < h.n_buckets; ++b) {
        if (m_buckets[b] > m_buckets[b + 1]) {
            *error = "corrupt (buckets out of order)";
            return false;
        }
        for (uint64_t i = m_buckets[b]; i < m_buckets[b + 1]; ++i) {
            const StaticRecord& r = m_records[i];
            const auto t0 = static_cast<uint32_t>(pair_token(r.key, 0));
            const auto t1 = static_cast<uint32_t>(pair_token(r.key, 1));
            const bool key_ok = t0 < h.n_vocab && t1 < h.n_vocab && bucket_of(r.key, m_bucket_bits) == b &&
                                (i == m_buckets[b] || (m_records[i - 1].key & k_pair_mask) < (r.key & k_pair_mask));
            const uint64_t offset = r.span & k_span_offset_mask, length = r.span >> k_span_offset_bits;
            if (!key_ok || offset != next_offset || length == 0 || length > h.n_followers - offset) {
                *error = "corrupt (record " + std::to_string(i) + ")";
                return false;
            }
            const Follower* followers = m_followers + offset;
            for (uint64_t f = 0; f < length; ++f) {
                const Follower& fw = followers[f];
                const bool ok = fw.token >= 0 && static_cast<uint32_t>(fw.token) < h.n_vocab && fw.count > 0 &&
                                (f == 0 || followers[f - 1].token < fw.token);
                if (!ok) {
                    *error = "corrupt (follower " + std::to_string(offset + f) + ")";
                    return false;
                }
                total += fw.count;
            }
            const token_t fallback = static_fallback(
                length, [&](size_t f) { return followers[f].token; }, [&](size_t f) { return followers[f].count; });
            if (record_fallback(r.key) != fallback) {
                *error = "corrupt (record " + std::to_string(i) + " drafting decision)";
                return false;
            }
            next_offset = offset + length;
        }
    }
    if (next_offset != h.n_followers || total != h.total_count) {
        *error = "corrupt (follower totals)";
        return false;
    }
    m_verified = true;
    return true;
}

}  // namespace lookup
