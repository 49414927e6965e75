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

struct FolderTableOptions {
    uint32_t n_vocab = 0;
    uint64_t fingerprint = 0;  // of the tokenizer
    uint32_t min_count = 2;
    size_t memory_limit = 0;
    // The documents are views of a read-only file mapping: each pass hands the pages it has read
    // back to the kernel as it goes (page_release.h), so they do not add up in resident memory.
    bool release_pages = false;
    // Threads that count the shares of a pass after the first (the first is one thread's).
    unsigned threads = 1;
};

struct FolderTableBuild {
    uint64_t n_tokens = 0;
    uint64_t n_keys = 0;        // written (total count >= min_count)
    uint64_t n_keys_seen = 0;   // counted
    uint32_t units = 0;         // hash ranges the keys were split into
    uint32_t passes = 0;        // over the documents, each counting one or more units
    uint64_t file_size = 0;
    size_t peak_bytes = 0;      // the largest pass's cache and sort buffer, and the bucket index
};

// Counts the n-grams (n = 1..4) of `documents` (no n-gram spans two of them) and writes the
// table to `path` through a temporary file and a rename. Memory stays near `memory_limit`
// whatever the documents' size: the keys are split by hash into units, and each pass over the
// documents counts and writes as many units as fit: the first one unit, sized from an upper
// estimate, the later ones as many as what the earlier passes measured allows. Tokens must be
// below n_vocab (checked by callers). On failure returns false with a one-line reason.
bool build_folder_table(const std::vector<TokenView>& documents, const FolderTableOptions& options,
                        const std::string& path, FolderTableBuild* stats, std::string* error);

}  // namespace lookup
