// A folder table (folder_table_format.h) opened for drafting: mapped, not read, so that opening
// one of any size is O(1) and every daemon of the user shares one copy of its pages.
#pragma once

#include "file_bytes.h"
#include "folder_table_format.h"
#include "ngram.h"

#include <cstdint>
#include <string>
#include <vector>

namespace lookup {

// open() checks the header against the file's size before mapping anything, and maps only a
// regular file owned by this user (the daemon writes these files into its own cache folder,
// exclusively created and renamed into place, never changed in place). find() trusts nothing it
// reads: offsets are bounded by the stream, a record that runs past its bucket ends the search,
// and followers are copied out with ids outside the vocabulary and zero counts left out, so any
// bytes (a crash mid-write elsewhere, a bad disk) give wrong drafts at worst, never a read
// outside the mapping or a token the model does not know. verify() compares the checksum.
class FolderTable {
public:
    FolderTable() = default;
    FolderTable(const FolderTable&) = delete;
    FolderTable& operator=(const FolderTable&) = delete;

    // On failure returns false and sets `error` to a one-line reason (without the path).
    bool open(const std::string& path, uint32_t expected_vocab, uint64_t expected_fingerprint, std::string* error);
    // Bytes the caller keeps alive and unchanged (the fuzzer); 8-byte aligned.
    bool open_memory(const unsigned char* data, size_t size, std::string* error);
    [[nodiscard]] bool verify(std::string* error) const;

    // The key's followers, ascending by token, copied into `scratch` (the span points there).
    [[nodiscard]] FollowerSpan find(NgramKey key, std::vector<Follower>& scratch) const;
    void prefetch(NgramKey key) const {
        if (m_buckets != nullptr) __builtin_prefetch(m_buckets + folder_bucket(key, m_header.bucket_bits));
    }

    [[nodiscard]] const FolderTableHeader& header() const { return m_header; }
    [[nodiscard]] bool is_open() const { return m_buckets != nullptr; }

private:
    bool attach(const FolderTableHeader& h, std::string* error);

    FileBytes m_bytes;
    FolderTableHeader m_header{};
    const unsigned char* m_stream = nullptr;
    const uint64_t* m_buckets = nullptr;
};

// Whether a header describes a file of `size` bytes this build can read; false with a reason.
bool check_folder_header(const FolderTableHeader& h, uint64_t size, std::string* error);

}  // namespace lookup
