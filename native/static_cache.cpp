#include "static_cache.h"

#include "static_cache_check.h"

#include <cstddef>
#include <cstring>
#include <utility>

namespace lookup {

namespace {

// The header alone, and against a file of `size` bytes: everything a reader relies on before it
// reads a section. Empty if sound. The layout is the writer's exactly (static_layout), so the
// declared counts fix every offset and the file's size; a file that does not add up is refused
// before anything in it is read.
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
    // Every key has at least one follower of count >= 1.
    if (h.n_keys > k_static_max_keys || h.n_followers > k_static_max_followers || h.n_keys > h.n_followers ||
        (h.n_keys == 0) != (h.n_followers == 0) || h.total_count < h.n_followers) {
        return "corrupt header (key or follower count)";
    }
    const StaticLayout layout = static_layout(h.n_keys, h.n_followers);
    if (h.n_buckets != layout.n_buckets) return "corrupt header (bucket count)";
    if (h.buckets_offset != layout.buckets_offset || h.records_offset != layout.records_offset ||
        h.followers_offset != layout.followers_offset) {
        return "corrupt header (section offsets)";
    }
    if (layout.file_size != size) return "corrupt header (section sizes do not add up to the file size)";
    return {};
}

[[nodiscard]] std::string describe_mismatch(const StaticHeader& h, std::optional<uint32_t> expected_vocab,
                                            std::optional<uint64_t> expected_fingerprint) {
    if (expected_vocab && h.n_vocab != *expected_vocab) {
        return "built for a vocabulary of " + std::to_string(h.n_vocab) + " tokens, the model has " +
               std::to_string(*expected_vocab);
    }
    if (expected_fingerprint && h.tokenizer_fingerprint != *expected_fingerprint) {
        return "built with another tokenizer than the model's (rebuild it with build-cache)";
    }
    return {};
}

// The section bounds a sound header cannot vouch for, read with a few small reads before the
// file is read or copied: the first and last bucket bounds and the first and last record spans.
// A file of zeros behind a plausible header (a sparse file: gigabytes that take no disk) fails
// here. `read_at(offset, out, size)` reads or sets `error`.
template <class ReadAt>
[[nodiscard]] std::string probe_sections(const StaticHeader& h, ReadAt&& read_at) {
    uint32_t first_bucket = 0, last_bucket = 0;
    if (!read_at(h.buckets_offset, &first_bucket, sizeof first_bucket) ||
        !read_at(h.buckets_offset + h.n_buckets * sizeof(uint32_t), &last_bucket, sizeof last_bucket)) {
        return "truncated while being read";
    }
    if (first_bucket != 0 || last_bucket != h.n_keys) return "corrupt (bucket bounds)";
    if (h.n_keys == 0) return {};
    StaticRecord first{}, last{};
    const uint64_t last_offset = h.records_offset + (h.n_keys - 1) * sizeof(StaticRecord);
    if (!read_at(h.records_offset, &first, sizeof first) || !read_at(last_offset, &last, sizeof last)) {
        return "truncated while being read";
    }
    if ((first.span & k_span_offset_mask) != 0) return "corrupt (record 0)";
    if ((last.span & k_span_offset_mask) + (last.span >> k_span_offset_bits) != h.n_followers) {
        return "corrupt (record " + std::to_string(h.n_keys - 1) + ")";
    }
    return {};
}

}  // namespace

bool StaticCache::open(const std::string& path, std::optional<uint32_t> expected_vocab,
                       std::optional<uint64_t> expected_fingerprint, std::string* error) {
    return open_file(path, expected_vocab, expected_fingerprint, nullptr, error);
}

bool StaticCache::open(const std::string& path, std::optional<uint32_t> expected_vocab,
                       std::optional<uint64_t> expected_fingerprint, const std::string& store_folder,
                       std::string* error) {
    return open_file(path, expected_vocab, expected_fingerprint, &store_folder, error);
}

bool StaticCache::open_file(const std::string& path, std::optional<uint32_t> expected_vocab,
                            std::optional<uint64_t> expected_fingerprint, const std::string* store_folder,
                            std::string* error) {
    close();
    ReadableFile file;
    std::string reason;
    if (!file.open(path, &reason)) {
        *error = "cannot open (" + reason + ")";
        return false;
    }
    if (file.size() < sizeof(StaticHeader)) {
        *error = file.size() == 0 ? "empty file, not a static cache" : "truncated (no complete header)";
        return false;
    }
    StaticHeader h;
    if (!file.read_at(0, &h, sizeof h, &reason)) {
        *error = "cannot open (" + reason + ")";
        return false;
    }
    reason = describe_header_error(h, file.size());
    if (reason.empty()) reason = describe_mismatch(h, expected_vocab, expected_fingerprint);
    if (reason.empty()) {
        std::string ignored;
        reason = probe_sections(h, [&](uint64_t offset, void* out, size_t n) {
            return file.read_at(offset, out, n, &ignored);
        });
    }
    if (!reason.empty()) {
        *error = reason;
        return false;
    }
    FileBytes bytes;
    Storage storage = Storage::memory;
    if (store_folder != nullptr) {
        // Never read into private memory instead: a file the store cannot take is not used.
        auto store = std::make_unique<StaticCacheStore>();
        if (!store->open(*store_folder, &reason)) {
            *error = "static cache store not usable: " + reason;
            return false;
        }
        if (store->find(h, &bytes)) {
            storage = Storage::stored_copy;
        } else {
            reason = file_check_error(h, file);
            bool store_failed = false;
            if (reason.empty() && !store->stage(file, &bytes, &m_staged, &reason, &store_failed)) {
                reason = store_failed ? "static cache store not usable: " + reason : "cannot open (" + reason + ")";
            }
            if (!reason.empty()) {
                *error = reason;
                return false;
            }
            storage = Storage::new_copy;
            m_store = std::move(store);
        }
    } else if (!bytes.read(file, &reason)) {
        *error = "cannot open (" + reason + ")";
        return false;
    }
    m_path = path;
    m_identity = file.identity();
    if (!attach(std::move(bytes), h, storage, error)) {
        close();
        return false;
    }
    return true;
}

bool StaticCache::open_memory(const unsigned char* data, size_t size, std::string* error) {
    close();
    if (size < sizeof(StaticHeader)) {
        *error = size == 0 ? "empty file, not a static cache" : "truncated (no complete header)";
        return false;
    }
    StaticHeader h;
    std::memcpy(&h, data, sizeof h);
    std::string reason = describe_header_error(h, size);
    if (reason.empty()) {
        reason = probe_sections(h, [&](uint64_t offset, void* out, size_t n) {
            if (offset > size || n > size - offset) return false;
            std::memcpy(out, data + offset, n);
            return true;
        });
    }
    if (!reason.empty()) {
        *error = reason;
        return false;
    }
    FileBytes bytes;
    bytes.borrow(data, size);
    if (!attach(std::move(bytes), h, Storage::borrowed, error)) {
        close();
        return false;
    }
    return true;
}

bool StaticCache::attach(FileBytes bytes, const StaticHeader& h, Storage storage, std::string* error) {
    // The header was checked as read first; the bytes must still begin with it (the file may
    // have been rewritten between the two reads).
    if (bytes.size() != h.file_size || std::memcmp(bytes.data(), &h, sizeof h) != 0) {
        *error = "changed while being read (open it again)";
        return false;
    }
    if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(uint64_t) != 0) {
        *error = "bytes not 8-byte aligned";
        return false;
    }
    m_file = std::move(bytes);
    m_header = h;
    m_storage = storage;
    m_open = true;
    // Copies and mappings are page-aligned, so every section offset (a multiple of 64) is aligned.
    m_buckets = reinterpret_cast<const uint32_t*>(m_file.data() + h.buckets_offset);
    m_records = reinterpret_cast<const StaticRecord*>(m_file.data() + h.records_offset);
    m_followers = reinterpret_cast<const Follower*>(m_file.data() + h.followers_offset);
    m_bucket_bits = static_layout(h.n_keys, h.n_followers).bucket_bits;
    // A stored copy is named only once verified (StaticCacheStore::commit).
    m_verified.store(storage == Storage::stored_copy);
    return true;
}

void StaticCache::close() {
    if (m_store != nullptr) m_store->discard(m_staged);
    m_store.reset();
    m_staged.clear();
    m_file.close();
    m_path.clear();
    m_identity = {};
    m_header = {};
    m_storage = Storage::none;
    m_open = false;
    m_buckets = nullptr;
    m_records = nullptr;
    m_followers = nullptr;
    m_verified.store(false);
}

bool StaticCache::changed_on_disk() const {
    FileIdentity now;
    return !identity_at(m_path, &now) || now != m_identity;
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
    std::lock_guard<std::mutex> lock(m_verify_mutex);
    if (m_verified.load()) return true;
    if (!m_open) {
        *error = "static cache is closed";
        return false;
    }
    const std::string problem = memory_check_error(m_header, m_file.data());
    if (!problem.empty()) {
        *error = problem;
        if (m_store != nullptr) m_store->discard(m_staged);
        m_store.reset();
        return false;
    }
    if (m_store != nullptr) m_store->commit(m_staged, m_header);
    m_store.reset();
    m_staged.clear();
    m_verified.store(true);
    return true;
}

}  // namespace lookup
