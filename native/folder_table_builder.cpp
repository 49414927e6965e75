#include "folder_table_builder.h"

#include "atomic_file.h"
#include "checksum.h"
#include "folder_table_format.h"
#include "ngram_cache.h"

#include <algorithm>
#include <cstring>

namespace lookup {

namespace {

// What one token of input costs while its partition is counted: the cache (slots and pool for
// the four keys it ends) and the sort buffer. An upper estimate from the cache's layout, so that
// a build stays within its limit rather than near it on average.
constexpr size_t k_bytes_per_token = 96;
// Buckets hold about this many records each on average.
constexpr uint64_t k_records_per_bucket = 4;

uint32_t ceil_log2(uint64_t x) {
    uint32_t bits = 0;
    while (bits < 63 && (uint64_t{1} << bits) < x) ++bits;
    return bits;
}

struct Entry {
    uint64_t bucket;
    NgramKey key;
    FollowerSpan followers;
};

// Writes the stream, keeping its checksum and the bucket index as it goes.
class StreamWriter {
public:
    StreamWriter(AtomicFile& file, uint32_t bucket_bits)
        : m_file(file), m_buckets((uint64_t{1} << bucket_bits) + 1, 0) {}

    void record(uint64_t bucket, NgramKey key, const std::vector<Follower>& followers) {
        fill_buckets_until(bucket);
        const uint32_t n = static_cast<uint32_t>(followers.size());
        unsigned char head[k_folder_record_head];
        std::memcpy(head, &key.lo, 8);
        std::memcpy(head + 8, &key.hi, 8);
        std::memcpy(head + 16, &n, 4);
        put(head, sizeof head);
        put(followers.data(), followers.size() * sizeof(Follower));
    }

    // Pads the stream to 8 bytes, then writes the bucket index.
    void finish() {
        static constexpr unsigned char zeros[8] = {};
        put(zeros, (8 - m_offset % 8) % 8);
        m_stream_bytes = m_offset;
        fill_buckets_until(m_buckets.size() - 1);
        m_buckets.back() = m_stream_bytes;
        m_file.write(m_buckets.data(), m_buckets.size() * sizeof(uint64_t));
        m_checksum.update(m_buckets.data(), m_buckets.size() * sizeof(uint64_t));
    }

    [[nodiscard]] uint64_t stream_bytes() const { return m_stream_bytes; }
    [[nodiscard]] uint64_t checksum() const { return m_checksum.digest(); }
    [[nodiscard]] size_t index_bytes() const { return m_buckets.size() * sizeof(uint64_t); }

private:
    void put(const void* data, size_t size) {
        m_file.write(data, size);
        m_checksum.update(data, size);
        m_offset += size;
    }
    // Buckets up to `bucket` (included) start here unless they started before.
    void fill_buckets_until(uint64_t bucket) {
        for (; m_next_bucket <= bucket; ++m_next_bucket) m_buckets[m_next_bucket] = m_offset;
    }

    AtomicFile& m_file;
    std::vector<uint64_t> m_buckets;
    uint64_t m_next_bucket = 0;
    uint64_t m_offset = 0;
    uint64_t m_stream_bytes = 0;
    Checksum m_checksum;
};

}  // namespace

bool build_folder_table(const std::vector<TokenView>& documents, uint32_t n_vocab, uint64_t fingerprint,
                        uint32_t min_count, size_t memory_limit, const std::string& path,
                        FolderTableBuild* stats, std::string* error) {
    FolderTableBuild s;
    for (const TokenView& d : documents) s.n_tokens += d.size;
    const uint32_t bucket_bits = std::clamp(ceil_log2(s.n_tokens / k_records_per_bucket + 1),
                                            k_folder_table_min_bits, uint32_t{24});
    const size_t index_bytes = ((size_t{1} << bucket_bits) + 1) * sizeof(uint64_t);
    const size_t for_counting = memory_limit > 2 * index_bytes ? memory_limit - index_bytes : memory_limit / 2;
    const uint32_t partition_bits =
        std::min(bucket_bits, ceil_log2((s.n_tokens * k_bytes_per_token + for_counting - 1) / std::max<size_t>(for_counting, 1)));
    s.partitions = 1u << partition_bits;

    AtomicFile file(path, 0600);  // the n-grams of the user's code: the user's only
    FolderTableHeader h{};
    file.write(&h, sizeof h);  // rewritten once the checksum is known
    StreamWriter stream(file, bucket_bits);
    std::vector<Entry> entries;
    std::vector<Follower> followers;
    for (uint32_t p = 0; p < s.partitions; ++p) {
        NgramCache cache;
        for (const TokenView& d : documents) {
            for (size_t i = 1; i < d.size; ++i) {
                for (size_t n = 1; n <= k_ngram_max && n <= i; ++n) {
                    const NgramKey key = make_key(d.data + i - n, static_cast<int>(n));
                    if (partition_bits > 0 && (hash_key(key) >> (64 - partition_bits)) != p) continue;
                    cache.add_count(key, d.data[i], 1);
                }
            }
        }
        s.n_keys_seen += cache.n_keys();
        entries.clear();
        cache.for_each([&](NgramKey key, const FollowerSpan& span) {
            if (span.sum >= min_count) entries.push_back({folder_bucket(key, bucket_bits), key, span});
        });
        s.peak_bytes = std::max(s.peak_bytes, cache.memory_bytes() + entries.capacity() * sizeof(Entry));
        std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
            return a.bucket != b.bucket ? a.bucket < b.bucket : a.key < b.key;
        });
        for (const Entry& e : entries) {
            followers.clear();
            for (const Follower& f : e.followers) {
                if (f.count > 0) followers.push_back(f);
            }
            if (!e.followers.sorted) {
                std::sort(followers.begin(), followers.end(),
                          [](const Follower& a, const Follower& b) { return a.token < b.token; });
            }
            stream.record(e.bucket, e.key, followers);
        }
        s.n_keys += entries.size();
        entries = std::vector<Entry>();
    }
    stream.finish();
    std::memcpy(h.magic, k_folder_table_magic, sizeof h.magic);
    h.format_version = k_folder_table_version;
    h.bucket_bits = bucket_bits;
    h.n_vocab = n_vocab;
    h.min_count = min_count;
    h.fingerprint = fingerprint;
    h.n_keys = s.n_keys;
    h.stream_bytes = stream.stream_bytes();
    h.file_size = folder_table_size(h.stream_bytes, bucket_bits);
    h.checksum = stream.checksum();
    file.write_at(0, &h, sizeof h);
    if (!file.commit(error)) return false;
    s.file_size = h.file_size;
    s.peak_bytes += stream.index_bytes();
    if (stats != nullptr) *stats = s;
    return true;
}

}  // namespace lookup
