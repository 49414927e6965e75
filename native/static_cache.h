// The read-only static cache of 2-grams.
#pragma once

#include "file_bytes.h"
#include "ngram.h"
#include "static_cache_format.h"
#include "static_cache_store.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace lookup {

// open() checks the header against the file's size, and probes the section bounds, before
// anything large is read or allocated; then the bytes are read into private memory or, through
// the store, mapped from a private copy (static_cache_store.h). Nothing done to the file
// afterwards reaches what was checked, and changed_on_disk() tells when it was replaced or
// rewritten. verify() checks the bytes once (checksum, then every offset and length before it
// is used, then the structure). find() trusts nothing it reads: a corrupt bucket or span yields
// "no followers", never a read outside the bytes.
class StaticCache {
public:
    // Where the bytes are.
    enum class Storage {
        none,
        memory,       // read whole into private memory
        stored_copy,  // the store's copy of this file, mapped, verified when it was stored
        new_copy,     // copied into the store by this open, named there once verify() passes
        borrowed,     // memory given by the caller
    };

    // Without an expected vocabulary size or fingerprint, that check is skipped. On failure
    // returns false and sets `error` to a one-line reason (without the path).
    //
    // Reads the file whole into private memory: the file itself is what verify() checks
    // (inspect-cache --verify).
    bool open(const std::string& path, std::optional<uint32_t> expected_vocab,
              std::optional<uint64_t> expected_fingerprint, std::string* error);
    // Through the store in `store_folder`: maps the store's verified copy of a file with this
    // header (O(1), verified already), else checks the file whole (static_cache_check.h) and
    // only then copies it into the store and maps the copy, which verify() checks again (the
    // file may have changed since). A store that cannot be used (its folder, a full disk)
    // refuses the file: it is never read into private memory instead.
    bool open(const std::string& path, std::optional<uint32_t> expected_vocab,
              std::optional<uint64_t> expected_fingerprint, const std::string& store_folder, std::string* error);
    // Bytes the caller keeps alive and unchanged until close() (the fuzzer); 8-byte aligned.
    bool open_memory(const unsigned char* data, size_t size, std::string* error);
    bool verify(std::string* error);
    void close();

    StaticCache() = default;
    StaticCache(const StaticCache&) = delete;
    StaticCache& operator=(const StaticCache&) = delete;
    ~StaticCache() { close(); }

    [[nodiscard]] bool is_open() const { return m_open; }
    [[nodiscard]] bool verified() const { return m_verified.load(); }
    [[nodiscard]] const StaticHeader& header() const { return m_header; }
    [[nodiscard]] Storage storage() const { return m_storage; }
    // Whether the path opened now names another file or one modified since (or nothing): a
    // stat, no reading.
    [[nodiscard]] bool changed_on_disk() const;

    // A pair's followers and the token the static cache alone drafts after it (-1: none).
    struct Entry {
        FollowerSpan followers;
        token_t fallback = -1;
    };
    [[nodiscard]] Entry find(token_t t0, token_t t1) const;
    // Starts loading the pair's bucket; find() for the same pair follows soon.
    void prefetch(token_t t0, token_t t1) const {
        __builtin_prefetch(m_buckets + bucket_of(pack_pair(t0, t1), m_bucket_bits));
    }

    // Visits every (t0, t1, followers) in file order; only meaningful after verify().
    template <class Visit>
    void for_each(Visit&& visit) const {
        for (uint64_t i = 0; i < m_header.n_keys; ++i) {
            const StaticRecord& r = m_records[i];
            visit(pair_token(r.key, 0), pair_token(r.key, 1), span_at(r.span));
        }
    }

private:
    bool open_file(const std::string& path, std::optional<uint32_t> expected_vocab,
                   std::optional<uint64_t> expected_fingerprint, const std::string* store_folder,
                   std::string* error);
    bool attach(FileBytes bytes, const StaticHeader& h, Storage storage, std::string* error);
    [[nodiscard]] FollowerSpan span_at(uint64_t span) const;

    FileBytes m_file;
    std::string m_path;
    FileIdentity m_identity;  // the file's at open, for changed_on_disk()
    StaticHeader m_header{};  // a copy: checked once, then read without re-checking
    Storage m_storage = Storage::none;
    std::unique_ptr<StaticCacheStore> m_store;  // while a new copy waits for verify()
    std::string m_staged;
    std::mutex m_verify_mutex;
    bool m_open = false;
    const uint32_t* m_buckets = nullptr;
    const StaticRecord* m_records = nullptr;
    const Follower* m_followers = nullptr;
    int m_bucket_bits = 0;
    std::atomic<bool> m_verified{false};
};

}  // namespace lookup
