// The layout of a folder table: the n-grams (n = 1..4) of a workspace folder's files, written
// once by the daemon into the user's own cache folder and mapped by every daemon of that user.
//
// All integers little-endian. A header of 64 bytes, a stream of records, then the bucket index:
//
//   header      FolderTableHeader
//   stream      records, stream_bytes (a multiple of 8, zero padding after the last record):
//                 key lo u64, key hi u64 (ngram.h's NgramKey), n_followers u32,
//                 then n_followers x (token i32, count u32), ascending by token
//   buckets     u64[2^bucket_bits + 1]: the stream offset of each bucket's first record; the
//                 records of bucket b lie in [buckets[b], buckets[b + 1])
//
// A key belongs to bucket hash_key(key) >> (64 - bucket_bits); within a bucket records ascend
// by key. Keys whose followers' total count is below min_count are left out: they can never
// draft on their own, and leaving them out keeps the file a fraction of the in-memory cache.
#pragma once

#include "ngram.h"

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace lookup {

inline constexpr char k_folder_table_magic[8] = {'L', 'K', 'A', 'F', 'T', 'A', 'B', '\n'};
inline constexpr uint32_t k_folder_table_version = 1;
inline constexpr uint32_t k_folder_table_min_bits = 4;
inline constexpr uint32_t k_folder_table_max_bits = 30;
inline constexpr size_t k_folder_record_head = 20;  // key (16) + n_followers (4)

struct FolderTableHeader {
    char magic[8];
    uint32_t format_version;
    uint32_t bucket_bits;
    uint32_t n_vocab;
    uint32_t min_count;
    uint64_t fingerprint;  // of the tokenizer, as the static cache's
    uint64_t n_keys;
    uint64_t stream_bytes;
    uint64_t file_size;
    uint64_t checksum;  // checksum.h's, of every byte after the header
};
static_assert(sizeof(FolderTableHeader) == 64 && std::is_trivially_copyable_v<FolderTableHeader>);

[[nodiscard]] inline uint64_t folder_bucket(NgramKey key, uint32_t bucket_bits) {
    return hash_key(key) >> (64 - bucket_bits);
}

[[nodiscard]] inline uint64_t folder_table_size(uint64_t stream_bytes, uint32_t bucket_bits) {
    return sizeof(FolderTableHeader) + stream_bytes + 8 * ((uint64_t{1} << bucket_bits) + 1);
}

}  // namespace lookup
