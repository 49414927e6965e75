// Writes a folder table from many documents' tokens within a memory limit.
#pragma once

#include "ngram.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lookup {

struct TokenView {
    const token_t* data;
    size_t size;
};

struct FolderTableBuild {
    uint64_t n_tokens = 0;
    uint64_t n_keys = 0;        // written (total count >= min_count)
    uint64_t n_keys_seen = 0;   // counted
    uint32_t partitions = 0;    // passes over the documents
    uint64_t file_size = 0;
    size_t peak_bytes = 0;      // the largest partition's cache and sort buffer
};

// Counts the n-grams (n = 1..4) of `documents` (no n-gram spans two of them) and writes the
// table to `path` through a temporary file and a rename. Memory stays near `memory_limit`
// whatever the documents' size: the keys are split by hash into as many partitions as that
// takes, each counted in a pass of its own and written before the next. Tokens must be below
// n_vocab (checked by callers). On failure returns false with a one-line reason.
bool build_folder_table(const std::vector<TokenView>& documents, uint32_t n_vocab, uint64_t fingerprint,
                        uint32_t min_count, size_t memory_limit, const std::string& path,
                        FolderTableBuild* stats, std::string* error);

}  // namespace lookup
