// The user's store of verified private copies of static caches (one folder, by default
// ~/.cache/lookahead-lsp/static-caches), which opens a cache in O(1) after its first use
// without ever mapping a file that anyone could change underneath.
//
// A cache from a repository cannot be mapped: it may be rewritten or truncated while in use (a
// truncated page raises SIGBUS). Its first use copies it (in the kernel, or through a bounded
// buffer) into a new file of the store, created exclusively under a random name with mode 0600
// and made read-only, and maps the copy; once verify() has checked the copy it is renamed to its
// key: the header's checksum, the file size and the store's version (<checksum>-<size>.v1.lacache).
// A later open of a file whose header equals that copy's byte for byte maps the copy, verified
// already, instead of reading the file. The folder must be the user's and writable by nobody
// else, and everything in it is done relative to its open descriptor, so no path swapped above it
// redirects a copy. The program never changes a copy in place: a copy is replaced by a rename and
// removed by an unlink, which leave mappings intact.
//
// Bounded: after each new copy the store keeps the k_store_keep most recently used copies within
// k_store_bytes (the newest is always kept), and removes staged copies older than an hour (left
// by a process that died while copying).
#pragma once

#include "file_bytes.h"
#include "static_cache_format.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace lookup {

inline constexpr size_t k_store_keep = 8;
inline constexpr uint64_t k_store_bytes = uint64_t{4} << 30;
// Part of every copy's name: a reader whose verify() checks more must not trust copies that an
// older one verified, so a stricter verify() comes with the next version.
inline constexpr unsigned k_store_version = 1;

class StaticCacheStore {
public:
    StaticCacheStore() = default;
    StaticCacheStore(const StaticCacheStore&) = delete;
    StaticCacheStore& operator=(const StaticCacheStore&) = delete;
    ~StaticCacheStore();

    // Opens the store folder, creating it (mode 0700) if it is missing but its parent exists.
    // False with a one-line `error` if it cannot be used: not a folder (a symbolic link is not
    // followed), owned by another user, or writable by group or others.
    bool open(const std::string& folder, std::string* error);

    // Maps the verified copy of the file whose header is `header`, if the store holds one, and
    // marks it as just used.
    bool find(const StaticHeader& header, FileBytes* bytes);

    // Copies `source` into a new staged file and maps the copy. `staged` receives its name, for
    // commit() once the copy is verified, or discard(). On failure `error` says why and
    // `store_failed` whether the store was at fault (a full disk) rather than the source.
    bool stage(const ReadableFile& source, FileBytes* bytes, std::string* staged, std::string* error,
               bool* store_failed);
    // Names a verified staged copy by its key, then prunes the store.
    void commit(const std::string& staged, const StaticHeader& header);
    void discard(const std::string& staged);

    [[nodiscard]] static std::string key(const StaticHeader& header);

private:
    void prune();

    int m_folder = -1;
};

}  // namespace lookup
