#include "static_cache_check.h"

#include "checksum.h"

namespace lookup {

namespace {

// The checksum covers the file with its own field read as zero.
[[nodiscard]] Checksum header_sum(const StaticHeader& h) {
    StaticHeader zeroed = h;
    zeroed.checksum = 0;
    Checksum sum;
    sum.update(&zeroed, sizeof zeroed);
    return sum;
}

}  // namespace

std::string memory_check_error(const StaticHeader& h, const unsigned char* data) {
    Checksum sum = header_sum(h);
    sum.update(data + sizeof h, h.file_size - sizeof h);
    if (sum.digest() != h.checksum) return "corrupt (checksum mismatch)";
    MemoryCursor<uint32_t> bounds(data + h.buckets_offset), buckets(data + h.buckets_offset);
    MemoryCursor<StaticRecord> records(data + h.records_offset);
    MemoryCursor<Follower> followers(data + h.followers_offset);
    return structure_error(h, bounds, buckets, records, followers);
}

std::string file_check_error(const StaticHeader& h, const ReadableFile& file) {
    const uint64_t buckets_end = h.buckets_offset + (h.n_buckets + 1) * sizeof(uint32_t);
    const uint64_t records_end = h.records_offset + h.n_keys * sizeof(StaticRecord);
    FileCursor<uint32_t> bounds(file, h.buckets_offset, buckets_end), buckets(file, h.buckets_offset, buckets_end);
    FileCursor<StaticRecord> records(file, h.records_offset, records_end);
    FileCursor<Follower> followers(file, h.followers_offset, h.file_size);
    std::string error = structure_error(h, bounds, buckets, records, followers);
    for (const std::string* read_error : {&bounds.error(), &buckets.error(), &records.error(), &followers.error()}) {
        if (!read_error->empty()) return *read_error;
    }
    if (!error.empty()) return error;
    Checksum sum = header_sum(h);
    std::vector<unsigned char> buffer(k_check_chunk);
    for (uint64_t offset = sizeof h; offset < h.file_size;) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(buffer.size(), h.file_size - offset));
        if (!file.read_at(offset, buffer.data(), n, &error)) return error;
        sum.update(buffer.data(), n);
        offset += n;
    }
    return sum.digest() == h.checksum ? std::string() : "corrupt (checksum mismatch)";
}

}  // namespace lookup
