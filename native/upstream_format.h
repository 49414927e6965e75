// llama.cpp's lookup cache files (llama-lookup-create, llama-lookup --lookup-cache-*): no header,
// native endian, records until EOF: key as 4 x int32 (unused slots -1), int32 n_followers, then
// n_followers x (int32 token, int32 count).
#pragma once

#include "ngram_cache.h"
#include "static_cache.h"

#include <cstdint>
#include <string>

namespace lookup {

// Reads a whole file into `cache` (added to what it holds). On a malformed file returns false
// with a one-line reason and leaves `cache` as it was.
bool load_upstream(const std::string& path, uint32_t n_vocab, NgramCache* cache, std::string* error);

// Writes atomically (temp file + rename).
bool save_upstream(const std::string& path, const NgramCache& cache, std::string* error);
bool save_upstream(const std::string& path, const StaticCache& cache, std::string* error);

}  // namespace lookup
