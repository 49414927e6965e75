#include "folder_table.h"

#include "checksum.h"

#include <cstring>
#include <unistd.h>

namespace lookup {

bool check_folder_header(const FolderTableHeader& h, uint64_t size, std::string* error) {
    if (std::memcmp(h.magic, k_folder_table_magic, sizeof h.magic) != 0) {
        *error = "not a folder table";
    } else if (h.format_version != k_folder_table_version) {
        *error = "format version " + std::to_string(h.format_version) + ", expected " +
                 std::to_string(k_folder_table_version);
    } else if (h.bucket_bits < k_folder_table_min_bits || h.bucket_bits > k_folder_table_max_bits) {
        *error = "bucket bits " + std::to_string(h.bucket_bits) + " out of range";
    } else if (h.n_vocab == 0 || h.n_vocab > 0x7FFFFFFFu) {
        *error = "vocabulary size out of range";
    } else if (h.stream_bytes % 8 != 0 || h.stream_bytes > size || h.file_size != size ||
               folder_table_size(h.stream_bytes, h.bucket_bits) != size) {
        *error = std::to_string(size) + " bytes where the header announces another size";
    } else {
        return true;
    }
    return false;
}

bool FolderTable::open(const std::string& path, uint32_t expected_vocab, uint64_t expected_fingerprint,
                       std::string* error) {
    ReadableFile file;
    if (!file.open(path, error)) return false;
    // Mapped bytes are trusted not to shrink under the reader: only this user's own files.
    if (file.owner() != static_cast<uint32_t>(geteuid())) {
        *error = "not owned by this user";
        return false;
    }
    FolderTableHeader h;
    if (file.size() < sizeof h) {
        *error = "truncated (" + std::to_string(file.size()) + " bytes)";
        return false;
    }
    if (!file.read_at(0, &h, sizeof h, error) || !check_folder_header(h, file.size(), error)) return false;
    if (h.n_vocab != expected_vocab) {
        *error = "built for a vocabulary of " + std::to_string(h.n_vocab) + " tokens";
        return false;
    }
    if (h.fingerprint != expected_fingerprint) {
        *error = "built with another tokenizer";
        return false;
    }
    if (!m_bytes.map(file, error)) return false;
    return attach(h, error);
}

bool FolderTable::open_memory(const unsigned char* data, size_t size, std::string* error) {
    FolderTableHeader h;
    if (size < sizeof h) {
        *error = "truncated";
        return false;
    }
    std::memcpy(&h, data, sizeof h);
    if (!check_folder_header(h, size, error)) return false;
    m_bytes.borrow(data, size);
    return attach(h, error);
}

bool FolderTable::attach(const FolderTableHeader& h, std::string* /*error*/) {
    m_header = h;
    m_stream = m_bytes.data() + sizeof(FolderTableHeader);
    m_buckets = reinterpret_cast<const uint64_t*>(m_stream + h.stream_bytes);
    return true;
}

bool FolderTable::verify(std::string* error) const {
    if (!is_open()) {
        *error = "not open";
        return false;
    }
    if (checksum(m_stream, m_bytes.size() - sizeof(FolderTableHeader)) != m_header.checksum) {
        *error = "checksum mismatch";
        return false;
    }
    return true;
}

FollowerSpan FolderTable::find(NgramKey key, std::vector<Follower>& scratch) const {
    if (m_buckets == nullptr) return {};
    const uint64_t b = folder_bucket(key, m_header.bucket_bits);
    const uint64_t begin = m_buckets[b];
    const uint64_t end = m_buckets[b + 1];
    if (begin > end || end > m_header.stream_bytes) return {};
    uint64_t at = begin;
    while (end - at >= k_folder_record_head) {
        NgramKey stored;
        uint32_t n;
        std::memcpy(&stored.lo, m_stream + at, 8);
        std::memcpy(&stored.hi, m_stream + at + 8, 8);
        std::memcpy(&n, m_stream + at + 16, 4);
        at += k_folder_record_head;
        if (n > (end - at) / sizeof(Follower)) return {};
        if (stored != key) {
            at += uint64_t{n} * sizeof(Follower);
            continue;
        }
        scratch.resize(n);
        FollowerSpan span{scratch.data(), 0, 0, 0, true};
        Follower* out = scratch.data();
        token_t last = -1;
        for (uint32_t i = 0; i < n; ++i) {
            Follower f;
            std::memcpy(&f, m_stream + at + uint64_t{i} * sizeof(Follower), sizeof f);
            if (f.token < 0 || static_cast<uint32_t>(f.token) >= m_header.n_vocab || f.count == 0) continue;
            if (f.token <= last) span.sorted = false;
            last = f.token;
            out[span.size++] = f;
            span.sum += f.count;
            span.max_count = std::max(span.max_count, f.count);
        }
        return span;
    }
    return {};
}

}  // namespace lookup
