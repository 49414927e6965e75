// A fuzzer for the static cache format: StaticCache::open_memory, verify, find, for_each and
// drafting over raw bytes and over structured mutations of valid caches, each input placed in a
// guarded buffer (fuzz_harness.h: its last page followed by an inaccessible page, the bytes
// between its end and that page poisoned for AddressSanitizer), so that a read even one byte
// outside the file stops the run.
//
// An input is one flags byte and the file. Flag bit 0: before opening, set the header's
// file_size to the file's size and recompute the checksum, so that the structural checks behind
// a valid checksum are what is tested (most structured mutations set it).
//
// Two builds of the same file:
//   standalone (any C++17 compiler, what `make fuzz` builds with g++ -fsanitize=address,undefined):
//     static_cache_fuzz [--runs N] [--seed S] [FILE ...]   replays FILEs (inputs as above), or
//     mutates built-in seed caches N times; prints the inputs tried and how many opened and verified.
//   libFuzzer (clang++ -fsanitize=fuzzer,address,undefined -DLOOKUP_LIBFUZZER): the same target
//     and structured mutator; an empty corpus starts from the built-in seeds.
#include "checksum.h"
#include "drafter.h"
#include "fuzz_harness.h"
#include "ngram_cache.h"
#include "static_cache.h"
#include "static_cache_builder.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <utility>
#include <vector>

const char fuzz::k_name[] = "static_cache_fuzz";

namespace {

using fuzz::Bytes;
using fuzz::check_message;
using fuzz::fail;
using fuzz::Outcome;
using lookup::StaticCache;
using lookup::StaticHeader;
using lookup::StaticRecord;

void fix_checksum(uint8_t* file, size_t size) {
    if (size < sizeof(StaticHeader)) return;
    StaticHeader h;
    std::memcpy(&h, file, sizeof h);
    h.file_size = size;
    h.checksum = 0;
    std::memcpy(file, &h, sizeof h);
    h.checksum = lookup::checksum(file, size);
    std::memcpy(file, &h, sizeof h);
}

// Everything a reader may do with an open cache, verified or not.
Outcome exercise(const uint8_t* file, size_t size) {
    StaticCache cache;
    std::string error;
    if (!cache.open_memory(file, size, &error)) {
        check_message(error);
        return Outcome::refused;
    }
    const StaticHeader& h = cache.header();
    const auto vocab = static_cast<lookup::token_t>(h.n_vocab);
    // find() trusts nothing: any pair, verified or not.
    for (lookup::token_t t0 : {0, 1, vocab / 2, vocab - 1}) {
        for (lookup::token_t t1 : {0, 1, vocab / 3, vocab - 1}) {
            const auto entry = cache.find(t0, t1);
            for (const lookup::Follower& f : entry.followers) (void)f.count;
        }
    }
    if (!cache.verify(&error)) {
        check_message(error);
        return Outcome::opened;
    }
    uint64_t keys = 0, total = 0;
    std::vector<lookup::token_t> known;
    cache.for_each([&](lookup::token_t t0, lookup::token_t t1, const lookup::FollowerSpan& span) {
        ++keys;
        for (const lookup::Follower& f : span) total += f.count;
        const auto found = cache.find(t0, t1);
        if (found.followers.data != span.data || found.followers.size != span.size) fail("find", "span differs");
        if (known.size() < 64) known.insert(known.end(), {t0, t1});
    });
    if (keys != h.n_keys || total != h.total_count) fail("for_each", "counts differ from the header");
    lookup::DraftCaches sources;
    sources.repository = &cache;
    lookup::token_t out[16];
    for (size_t i = 0; i + 2 <= known.size(); i += 2) {
        const size_t n = lookup::draft(known.data() + i, 2, sources, 16, out);
        for (size_t j = 0; j < n; ++j) {
            if (out[j] < 0 || out[j] >= vocab) fail("draft", "token outside the vocabulary");
        }
    }
    return Outcome::verified;
}

Outcome run_one(const uint8_t* data, size_t size) { return fuzz::run_one(data, size, fix_checksum, exercise); }

// ---------------------------------------------------------------------------------------------
// Seeds: valid caches of a few shapes, built by the real writer.

std::vector<Bytes> build_seeds() {
    fuzz::SeedFile file("seed.cache");
    std::mt19937_64 rng(20);
    std::vector<Bytes> seeds;
    const std::vector<std::pair<uint32_t, size_t>> shapes = {{4, 0},  {4, 1},  {4, 2},   {5, 3},   {6, 5},
                                                             {8, 40}, {3, 200}, {40, 300}, {60, 2000}, {300, 3000}};
    for (const auto& [n_vocab, n_tokens] : shapes) {
        lookup::StaticCacheBuilder builder(n_vocab);
        std::vector<lookup::token_t> doc;
        for (size_t i = 0; i < n_tokens; ++i) {
            // Repeated phrases, so that pairs have several followers and some qualify to draft.
            doc.push_back(static_cast<lookup::token_t>(rng() % 4 == 0 ? rng() % n_vocab : (i * 7 + i / 5) % n_vocab));
        }
        builder.add(doc.data(), doc.size());
        StaticHeader written;
        std::string error;
        if (!builder.write(file.path(), rng(), &written, &error)) file.fail("seed", error);
        seeds.push_back(file.input());
    }
    return seeds;
}

// ---------------------------------------------------------------------------------------------
// Structured mutations: header fields, bucket bounds, record keys and spans, followers, set to
// values near the boundaries the reader checks.

class Mutator : public fuzz::MutatorBase<Mutator> {
public:
    using MutatorBase::MutatorBase;
    static constexpr size_t k_header_size = sizeof(StaticHeader);
    static constexpr unsigned k_raw_one_in = 4;

private:
    friend MutatorBase;

    void structured(Bytes& input, size_t max_size) {
        constexpr size_t h0 = 1;  // the file starts after the flags byte
        StaticHeader h;
        std::memcpy(&h, input.data() + h0, sizeof h);
        const size_t file_size = input.size() - h0;
        auto section = [&](uint64_t offset, uint64_t count, uint64_t item) -> std::pair<size_t, size_t> {
            if (offset > file_size || item == 0) return {0, 0};
            const uint64_t fits = std::min<uint64_t>(count, (file_size - offset) / item);
            return {static_cast<size_t>(h0 + offset), static_cast<size_t>(fits)};
        };
        switch (below(8)) {
            case 0: {  // one header field
                static const size_t fields[] = {offsetof(StaticHeader, n_keys),        offsetof(StaticHeader, n_followers),
                                                offsetof(StaticHeader, n_buckets),     offsetof(StaticHeader, total_count),
                                                offsetof(StaticHeader, buckets_offset), offsetof(StaticHeader, records_offset),
                                                offsetof(StaticHeader, followers_offset), offsetof(StaticHeader, file_size)};
                const size_t at = h0 + fields[below(std::size(fields))];
                put<uint64_t>(input, at, interesting(get<uint64_t>(input, at), file_size));
                if (chance(3)) {
                    put<uint32_t>(input, h0 + offsetof(StaticHeader, n_vocab),
                                  static_cast<uint32_t>(interesting(h.n_vocab, lookup::k_static_max_vocab)));
                }
                break;
            }
            case 1: {  // counts changed, the layout made to match: the body no longer does
                const uint64_t keys = chance(2) ? interesting(h.n_keys, h.n_followers) : h.n_keys;
                const uint64_t followers = chance(2) ? interesting(h.n_followers, h.n_keys) : h.n_followers;
                if (keys > 4096 || followers > 8192) break;
                const lookup::StaticLayout l = lookup::static_layout(keys, followers);
                if (h0 + l.file_size > max_size) break;
                input.resize(h0 + l.file_size, static_cast<uint8_t>(chance(2) ? 0 : m_rng()));
                h.n_keys = keys;
                h.n_followers = followers;
                h.n_buckets = l.n_buckets;
                h.buckets_offset = l.buckets_offset;
                h.records_offset = l.records_offset;
                h.followers_offset = l.followers_offset;
                h.file_size = l.file_size;
                std::memcpy(input.data() + h0, &h, sizeof h);
                break;
            }
            case 2: {  // a bucket bound
                const auto [at, n] = section(h.buckets_offset, h.n_buckets + 1, 4);
                if (n == 0) break;
                const size_t i = below(n);
                const uint32_t old = get<uint32_t>(input, at + 4 * i);
                put<uint32_t>(input, at + 4 * i, static_cast<uint32_t>(interesting(old, h.n_keys)));
                break;
            }
            case 3: {  // a record's key or span
                const auto [at, n] = section(h.records_offset, h.n_keys, sizeof(StaticRecord));
                if (n == 0) break;
                const size_t rec = at + sizeof(StaticRecord) * below(n);
                StaticRecord r = get<StaticRecord>(input, rec);
                if (chance(2)) {
                    const uint64_t offset = interesting(r.span & lookup::k_span_offset_mask, h.n_followers);
                    const uint64_t length = interesting(r.span >> lookup::k_span_offset_bits, h.n_followers);
                    r.span = (offset & lookup::k_span_offset_mask) | (length << lookup::k_span_offset_bits);
                } else {
                    const uint64_t t0 = interesting(lookup::pair_token(r.key, 0), h.n_vocab) & lookup::k_pair_token_mask;
                    const uint64_t t1 = interesting(lookup::pair_token(r.key, 1), h.n_vocab) & lookup::k_pair_token_mask;
                    r.key = (r.key & ~lookup::k_pair_mask) | t0 | (t1 << lookup::k_pair_token_bits);
                    if (chance(3)) r.key = (r.key & lookup::k_pair_mask) | (m_rng() << (2 * lookup::k_pair_token_bits));
                }
                put(input, rec, r);
                break;
            }
            case 4: {  // a follower's token or count
                const auto [at, n] = section(h.followers_offset, h.n_followers, sizeof(lookup::Follower));
                if (n == 0) break;
                const size_t f = at + sizeof(lookup::Follower) * below(n);
                const size_t field = f + (chance(2) ? 0 : 4);
                put<uint32_t>(input, field, static_cast<uint32_t>(interesting(get<uint32_t>(input, field), h.n_vocab)));
                break;
            }
            case 5: {  // two records or two followers swapped
                const bool records = chance(2);
                const auto [at, n] = records ? section(h.records_offset, h.n_keys, sizeof(StaticRecord))
                                             : section(h.followers_offset, h.n_followers, sizeof(lookup::Follower));
                const size_t item = records ? sizeof(StaticRecord) : sizeof(lookup::Follower);
                if (n < 2) break;
                const size_t a = at + item * below(n), b = at + item * below(n);
                for (size_t k = 0; k < item; ++k) std::swap(input[a + k], input[b + k]);
                break;
            }
            case 6: {  // a whole range of buckets claiming records that are not there
                const auto [at, n] = section(h.buckets_offset, h.n_buckets + 1, 4);
                if (n < 3) break;
                const size_t from = 1 + below(n - 2);
                const uint32_t value = static_cast<uint32_t>(interesting(h.n_keys, h.n_keys + 1 + below(1u << 20)));
                for (size_t i = from; i < n - 1 && i < from + 1 + below(8); ++i) put<uint32_t>(input, at + 4 * i, value);
                break;
            }
            default:  // truncated or grown
                if (chance(2)) {
                    input.resize(h0 + below(file_size));
                } else if (input.size() + 64 <= max_size) {
                    input.insert(input.end(), 8 * (1 + below(8)), 0);
                }
        }
    }
};

const std::vector<Bytes>& seeds() {
    static const std::vector<Bytes> built = build_seeds();
    return built;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    run_one(data, size);
    return 0;
}

#ifdef LOOKUP_LIBFUZZER
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
    return fuzz::custom_mutate<Mutator>(data, size, max_size, seed, seeds());
}
#else
int main(int argc, char** argv) {
    const fuzz::Options options(argc, argv);
    if (!options.files.empty()) return fuzz::replay(options.files, run_one);
    fuzz::print_summary(fuzz::mutate_seeds<Mutator>(seeds(), options, run_one, "a built cache does not verify"), "", "");
    return 0;
}
#endif
