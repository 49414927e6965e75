#include "folder_table_builder.h"

#include "atomic_file.h"
#include "checksum.h"
#include "folder_table_format.h"
#include "ngram_cache.h"
#include "page_release.h"
#include "scratch_file.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <thread>

namespace lookup {

namespace {

// What one token of input may cost while its unit is counted: the cache (slots and pool for the
// four keys it ends) and the sort buffer. An upper estimate from the cache's layout, which sizes
// the units so that the first pass, before anything is measured, stays within the limit.
constexpr size_t k_bytes_per_token = 96;
// Later passes are sized from what the earlier ones measured, with this much to spare: units
// are hash ranges, so their sizes differ by little more than chance.
constexpr double k_margin = 1.125;
constexpr uint32_t k_finer_bits = 2;
// Buckets hold about this many records each on average.
constexpr uint64_t k_records_per_bucket = 4;

uint32_t ceil_log2(uint64_t x) {
    uint32_t bits = 0;
    while (bits < 63 && (uint64_t{1} << bits) < x) ++bits;
    return bits;
}

// What the units counted so far held, to size the next pass.
struct UnitCosts {
    uint64_t units = 0;
    uint64_t keys = 0;
    uint64_t pool = 0;     // followers in the caches' pools
    uint64_t written = 0;  // keys at or above min_count

    [[nodiscard]] size_t projected(double n, uint64_t of) const {
        return static_cast<size_t>(k_margin * n * static_cast<double>(of) / static_cast<double>(units)) + 1;
    }
    [[nodiscard]] size_t bytes(uint64_t n_units) const;
    // How many of the `left` units the next pass may count within `limit` bytes (at least one),
    // split among `shares` caches of their own (each rounds its slots up on its own).
    [[nodiscard]] uint64_t fit(size_t limit, uint64_t left, uint64_t shares) const {
        if (units == 0) return 1;
        const auto pass_bytes = [&](uint64_t n) {
            const uint64_t k = std::min(shares, n);
            return k * bytes((n + k - 1) / k);
        };
        uint64_t lo = 1, hi = left;
        while (lo < hi) {
            const uint64_t mid = lo + (hi - lo + 1) / 2;
            if (pass_bytes(mid) <= limit) lo = mid; else hi = mid - 1;
        }
        return lo;
    }
};

// The cache is far larger than the CPU's: occurrences are added in batches whose slots were
// prefetched as they were collected, so their cache misses overlap.
class Batch {
public:
    void push(NgramCache& cache, NgramKey key, token_t follower) {
        cache.prefetch(key);
        m_keys[m_size] = key;
        m_followers[m_size] = follower;
        if (++m_size == k_size) apply(cache);
    }
    void apply(NgramCache& cache) {
        for (size_t i = 0; i < m_size; ++i) cache.add_count(m_keys[i], m_followers[i], 1);
        m_size = 0;
    }

private:
    static constexpr size_t k_size = 16;
    NgramKey m_keys[k_size];
    token_t m_followers[k_size];
    size_t m_size = 0;
};

// The first pass hashes every n-gram occurrence and writes the top byte of each hash to a
// scratch file, in document order: four bytes for each position i >= 1 of a document, one for
// each n = 1..4 (where n > i there is no n-gram and the byte is never read). Later passes read
// those bytes instead of hashing every key again, and build and hash only the keys whose byte
// can hold one of their units: over a large folder, a pass costs a read of the bytes rather
// than a hash of every key, and there may be hundreds of passes.
constexpr size_t k_bytes_per_position = k_ngram_max;
constexpr size_t k_scratch_chunk = size_t{1} << 22;

[[nodiscard]] uint8_t hash_byte(uint64_t hash) { return static_cast<uint8_t>(hash >> 56); }

// Which hash bytes may belong to the units [first, first + count): a contiguous range of bytes,
// as units are contiguous ranges of hashes.
class ByteRange {
public:
    ByteRange(uint32_t unit_bits, uint64_t first, uint64_t count) {
        const uint64_t last = first + count - 1;
        if (unit_bits >= 8) {
            m_lo = static_cast<uint8_t>(first >> (unit_bits - 8));
            m_span = static_cast<uint8_t>((last >> (unit_bits - 8)) - (first >> (unit_bits - 8)));
        } else {
            m_lo = static_cast<uint8_t>(first << (8 - unit_bits));
            m_span = static_cast<uint8_t>((((last + 1) << (8 - unit_bits)) - 1) - (first << (8 - unit_bits)));
        }
    }
    [[nodiscard]] bool has(uint8_t b) const { return static_cast<uint8_t>(b - m_lo) <= m_span; }
    // Whether any of the 16 bytes at p is in the range (most blocks are not, in a pass of many).
    [[nodiscard]] bool any_of_16(const unsigned char* p) const {
        typedef uint8_t v16 __attribute__((vector_size(16)));
        v16 v;
        std::memcpy(&v, p, sizeof v);
        const v16 hit = (v16)((v - m_lo) <= m_span);
        uint64_t words[2];
        std::memcpy(words, &hit, sizeof words);
        return (words[0] | words[1]) != 0;
    }

private:
    uint8_t m_lo = 0;
    uint8_t m_span = 0;
};

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

size_t UnitCosts::bytes(uint64_t n_units) const {
    const double n = static_cast<double>(n_units);
    return NgramCache::slots_for(projected(n, keys)) * NgramCache::slot_bytes() + projected(n, pool) * sizeof(Follower) +
           projected(n, written) * sizeof(Entry);
}

// A pass's units [first, first + count), or the part of them one thread counts: their own
// cache, then their records sorted for the stream.
struct Share {
    uint64_t first = 0;
    uint64_t count = 0;
    NgramCache cache;
    std::vector<Entry> entries;
    std::string error;
    bool ok = true;
};

// Counts shares of passes over one build's documents.
class Counter {
public:
    Counter(const std::vector<TokenView>& documents, const FolderTableOptions& options, uint32_t unit_bits,
            uint32_t bucket_bits, ScratchFile& scratch)
        : m_documents(documents), m_options(options), m_unit_bits(unit_bits), m_bucket_bits(bucket_bits),
          m_scratch(scratch) {}

    // The first pass: every key is hashed, and its hash byte written to the scratch file when
    // other passes will follow.
    void first_pass(Share& share, bool keep_bytes) {
        Batch batch;
        PageRelease pages(m_options.release_pages);
        for (const TokenView& d : m_documents) {
            for (size_t i = 1; i < d.size; ++i) {
                unsigned char position[k_bytes_per_position] = {};
                for (size_t n = 1; n <= k_ngram_max && n <= i; ++n) {
                    const NgramKey key = make_key(d.data + i - n, static_cast<int>(n));
                    const uint64_t hash = hash_key(key);
                    position[n - 1] = hash_byte(hash);
                    if (in(share, hash)) batch.push(share.cache, key, d.data[i]);
                }
                if (keep_bytes) m_scratch.append(position, sizeof position);
            }
            pages.done_with(d.data, d.size * sizeof(token_t));
        }
        batch.apply(share.cache);
        if (keep_bytes) share.ok = m_scratch.finish_writing(&share.error);
        if (share.ok) sort_entries(share);
    }

    // A later pass's share: only the keys whose hash byte may be in its units are built. Each
    // share's thread hands back the pages it has read: where only one did, the pages that the
    // other read after it stayed mapped until the pass ended (the whole kernel's store, 1.3 GB,
    // in VmRSS); a page the other still needs is mapped again from the page cache.
    void later_pass(Share& share) {
        try {
            count_from_scratch(share);
            if (share.ok) sort_entries(share);
        } catch (const std::bad_alloc&) {
            share.ok = false;
            share.error = "out of memory while counting";
        }
    }

private:
    [[nodiscard]] bool in(const Share& share, uint64_t hash) const {
        // Unsigned: units below `first` wrap around to far above `count`.
        return (m_unit_bits > 0 ? hash >> (64 - m_unit_bits) : 0) - share.first < share.count;
    }

    void count_from_scratch(Share& share) {
        const ByteRange range(m_unit_bits, share.first, share.count);
        PageRelease pages(m_options.release_pages);
        std::vector<unsigned char> bytes;
        Batch batch;
        uint64_t offset = 0;  // of the document's first byte in the scratch file
        for (const TokenView& d : m_documents) {
            const size_t n_bytes = d.size > 1 ? k_bytes_per_position * (d.size - 1) : 0;
            for (size_t done = 0; done < n_bytes;) {
                bytes.resize(std::min(k_scratch_chunk, n_bytes - done) + 16);  // + room for the last block
                const size_t got = m_scratch.read_at(offset + done, bytes.data(), bytes.size() - 16, &share.error);
                if (got != bytes.size() - 16) {
                    if (share.error.empty()) share.error = "the scratch file ended early";
                    share.ok = false;
                    return;
                }
                std::memset(bytes.data() + got, 0, 16);
                for (size_t b = 0; b < got; b += 16) {
                    if (!range.any_of_16(bytes.data() + b)) continue;
                    for (size_t k = b; k < std::min(b + 16, got); ++k) {
                        if (!range.has(bytes[k])) continue;
                        const size_t at = done + k;
                        const size_t i = 1 + at / k_bytes_per_position;
                        const size_t n = 1 + at % k_bytes_per_position;
                        if (n > i) continue;
                        const NgramKey key = make_key(d.data + i - n, static_cast<int>(n));
                        if (in(share, hash_key(key))) batch.push(share.cache, key, d.data[i]);
                    }
                }
                done += got;
            }
            offset += n_bytes;
            pages.done_with(d.data, d.size * sizeof(token_t));
        }
        batch.apply(share.cache);
    }

    void sort_entries(Share& share) const {
        size_t n_written = 0;
        share.cache.for_each([&](NgramKey, const FollowerSpan& span) { n_written += span.sum >= m_options.min_count; });
        share.entries.reserve(n_written);
        share.cache.for_each([&](NgramKey key, const FollowerSpan& span) {
            if (span.sum >= m_options.min_count) share.entries.push_back({folder_bucket(key, m_bucket_bits), key, span});
        });
        std::sort(share.entries.begin(), share.entries.end(), [](const Entry& a, const Entry& b) {
            return a.bucket != b.bucket ? a.bucket < b.bucket : a.key < b.key;
        });
    }

    const std::vector<TokenView>& m_documents;
    const FolderTableOptions& m_options;
    uint32_t m_unit_bits;
    uint32_t m_bucket_bits;
    ScratchFile& m_scratch;
};

}  // namespace

bool build_folder_table(const std::vector<TokenView>& documents, const FolderTableOptions& options,
                        const std::string& path, FolderTableBuild* stats, std::string* error) {
    FolderTableBuild s;
    for (const TokenView& d : documents) s.n_tokens += d.size;
    const uint32_t bucket_bits = std::clamp(ceil_log2(s.n_tokens / k_records_per_bucket + 1),
                                            k_folder_table_min_bits, uint32_t{24});
    const size_t index_bytes = ((size_t{1} << bucket_bits) + 1) * sizeof(uint64_t);
    const size_t limit = options.memory_limit;
    const size_t for_counting = limit > 2 * index_bytes ? limit - index_bytes : limit / 2;
    // Units are the top bits of a key's hash, as buckets are, so counting them in order writes
    // the buckets in order. Where one pass will not do, a unit is a quarter of what the estimate
    // would fit in the limit: the cache's slots come in powers of two, and finer units let a
    // pass fill more of the limit.
    const uint32_t estimate_bits =
        ceil_log2((s.n_tokens * k_bytes_per_token + for_counting - 1) / std::max<size_t>(for_counting, 1));
    const uint32_t unit_bits = std::min(bucket_bits, estimate_bits > 0 ? estimate_bits + k_finer_bits : 0);
    const uint64_t n_units = uint64_t{1} << unit_bits;
    s.units = static_cast<uint32_t>(n_units);

    AtomicFile file(path, 0600);  // the n-grams of the user's code: the user's only
    FolderTableHeader h{};
    file.write(&h, sizeof h);  // rewritten once the checksum is known
    StreamWriter stream(file, bucket_bits);
    std::vector<Follower> followers;
    UnitCosts costs;
    const size_t slash = path.find_last_of('/');
    ScratchFile scratch(slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash));
    Counter counter(documents, options, unit_bits, bucket_bits, scratch);
    for (uint64_t first = 0; first < n_units;) {
        // The first pass is one share (it writes the scratch file in order); a later one is
        // split among the threads, each counting its part of the units into a cache of its own:
        // about the same memory as one cache of them all, the hash table's misses on every core.
        const uint64_t threads = first == 0 ? 1 : std::max(options.threads, 1u);
        const uint64_t count = costs.fit(for_counting, n_units - first, threads);
        const uint64_t n_shares = std::min(threads, count);
        std::vector<Share> shares(n_shares);
        for (uint64_t k = 0; k < n_shares; ++k) {
            Share& share = shares[k];
            share.first = first + count * k / n_shares;
            share.count = first + count * (k + 1) / n_shares - share.first;
            if (costs.units > 0) {
                const double n = static_cast<double>(share.count);
                share.cache.reserve(costs.projected(n, costs.keys), costs.projected(n, costs.pool));
            }
        }
        if (first == 0) {
            counter.first_pass(shares[0], count < n_units);
        } else {
            std::vector<std::thread> helpers;
            for (uint64_t k = 1; k < n_shares; ++k) {
                helpers.emplace_back([&counter, &shares, k] { counter.later_pass(shares[k]); });
            }
            counter.later_pass(shares[0]);
            for (std::thread& t : helpers) t.join();
        }
        size_t pass_bytes = 0;
        for (Share& share : shares) {
            if (!share.ok) {
                *error = share.error;
                return false;
            }
            pass_bytes += share.cache.memory_bytes() + share.entries.capacity() * sizeof(Entry);
        }
        s.peak_bytes = std::max(s.peak_bytes, pass_bytes);
        for (Share& share : shares) {
            for (const Entry& e : share.entries) {
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
            s.n_keys_seen += share.cache.n_keys();
            s.n_keys += share.entries.size();
            costs.units += share.count;
            costs.keys += share.cache.n_keys();
            costs.pool += share.cache.pool_size();
            costs.written += share.entries.size();
        }
        ++s.passes;
        first += count;
    }
    stream.finish();
    std::memcpy(h.magic, k_folder_table_magic, sizeof h.magic);
    h.format_version = k_folder_table_version;
    h.bucket_bits = bucket_bits;
    h.n_vocab = options.n_vocab;
    h.min_count = options.min_count;
    h.fingerprint = options.fingerprint;
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
