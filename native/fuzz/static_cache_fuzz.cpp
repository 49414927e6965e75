// A fuzzer for the static cache format: StaticCache::open_memory, verify, find, for_each and
// drafting over raw bytes and over structured mutations of valid caches, each input placed in a
// guarded buffer (its last page followed by an inaccessible page, the bytes between its end and
// that page poisoned for AddressSanitizer), so that a read even one byte outside the file stops
// the run.
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
#include "ngram_cache.h"
#include "static_cache.h"
#include "static_cache_builder.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define LOOKUP_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LOOKUP_ASAN 1
#endif
#endif
#ifdef LOOKUP_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace {

using lookup::StaticCache;
using lookup::StaticHeader;
using lookup::StaticRecord;
using Bytes = std::vector<uint8_t>;

constexpr uint8_t k_fix_checksum = 1;

[[noreturn]] void fail(const char* what, const std::string& detail) {
    std::fprintf(stderr, "static_cache_fuzz: %s: %s\n", what, detail.c_str());
    std::abort();
}

// `size` bytes at the start of fresh pages, read-only, the page after them inaccessible.
class GuardedBuffer {
public:
    GuardedBuffer(const uint8_t* data, size_t size) : m_size(size) {
        const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
        m_data_pages = (size + page - 1) / page * page;
        m_total = m_data_pages + page;
        void* p = ::mmap(nullptr, m_total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) fail("mmap", std::strerror(errno));
        m_base = static_cast<uint8_t*>(p);
        if (size > 0) std::memcpy(m_base, data, size);
        ::mprotect(m_base + m_data_pages, page, PROT_NONE);
    }
    ~GuardedBuffer() {
#ifdef LOOKUP_ASAN
        ASAN_UNPOISON_MEMORY_REGION(m_base + m_size, m_data_pages - m_size);
#endif
        ::munmap(m_base, m_total);
    }
    GuardedBuffer(const GuardedBuffer&) = delete;
    GuardedBuffer& operator=(const GuardedBuffer&) = delete;

    [[nodiscard]] uint8_t* writable() { return m_base; }
    // Done writing: read-only from here on, the slack before the guard page poisoned.
    const uint8_t* seal() {
        if (m_data_pages > 0) ::mprotect(m_base, m_data_pages, PROT_READ);
#ifdef LOOKUP_ASAN
        ASAN_POISON_MEMORY_REGION(m_base + m_size, m_data_pages - m_size);
#endif
        return m_base;
    }

private:
    uint8_t* m_base = nullptr;
    size_t m_size = 0;
    size_t m_data_pages = 0;
    size_t m_total = 0;
};

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

void check_message(const std::string& error) {
    if (error.empty() || error.find('\n') != std::string::npos) fail("bad error message", "[" + error + "]");
}

enum class Outcome { refused, opened, verified };

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
    lookup::DraftSources sources;
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

Outcome run_one(const uint8_t* data, size_t size) {
    if (size == 0) return Outcome::refused;
    GuardedBuffer buffer(data + 1, size - 1);
    if (data[0] & k_fix_checksum) fix_checksum(buffer.writable(), size - 1);
    return exercise(buffer.seal(), size - 1);
}

// ---------------------------------------------------------------------------------------------
// Seeds: valid caches of a few shapes, built by the real writer.

std::vector<Bytes> build_seeds() {
    char folder[] = "/tmp/static_cache_fuzz.XXXXXX";
    if (::mkdtemp(folder) == nullptr) fail("mkdtemp", std::strerror(errno));
    const std::string path = std::string(folder) + "/seed.cache";
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
        if (!builder.write(path, rng(), &written, &error)) fail("seed", error);
        std::ifstream in(path, std::ios::binary);
        Bytes seed{k_fix_checksum};
        seed.insert(seed.end(), std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        seeds.push_back(std::move(seed));
    }
    std::remove(path.c_str());
    ::rmdir(folder);
    return seeds;
}

// ---------------------------------------------------------------------------------------------
// Structured mutations: header fields, bucket bounds, record keys and spans, followers, set to
// values near the boundaries the reader checks.

class Mutator {
public:
    explicit Mutator(uint64_t seed) : m_rng(seed) {}

    uint64_t below(uint64_t n) { return n == 0 ? 0 : m_rng() % n; }
    bool chance(unsigned one_in) { return below(one_in) == 0; }

    // A value near `near` or a boundary.
    uint64_t interesting(uint64_t near, uint64_t bound) {
        switch (below(10)) {
            case 0: return 0;
            case 1: return 1;
            case 2: return near + 1;
            case 3: return near - 1;
            case 4: return bound;
            case 5: return bound + 1;
            case 6: return bound - 1;
            case 7: return 0xFFFFFFFFull + below(3) - 1;
            case 8: return ~uint64_t{0} - below(2);
            default: return m_rng();
        }
    }

    // Mutates `input` (flags byte + file) in place; raw byte edits when the file has no header.
    void mutate(Bytes& input, size_t max_size) {
        if (input.empty()) input.push_back(0);
        const int rounds = 1 + static_cast<int>(below(3));
        for (int r = 0; r < rounds; ++r) {
            if (input.size() < 1 + sizeof(StaticHeader) || chance(4)) {
                raw(input, max_size);
            } else {
                structured(input, max_size);
            }
        }
        input[0] = chance(5) ? static_cast<uint8_t>(input[0] & ~k_fix_checksum)
                             : static_cast<uint8_t>(input[0] | k_fix_checksum);
    }

private:
    template <class T>
    T get(const Bytes& b, size_t at) {
        T v{};
        if (at + sizeof v <= b.size()) std::memcpy(&v, b.data() + at, sizeof v);
        return v;
    }
    template <class T>
    void put(Bytes& b, size_t at, T v) {
        if (at + sizeof v <= b.size()) std::memcpy(b.data() + at, &v, sizeof v);
    }

    void raw(Bytes& input, size_t max_size) {
        const size_t n = input.size();
        switch (below(6)) {
            case 0:
                if (n > 1) input[1 + below(n - 1)] ^= static_cast<uint8_t>(1u << below(8));
                break;
            case 1:
                if (n > 1) input[1 + below(n - 1)] = static_cast<uint8_t>(m_rng());
                break;
            case 2:
                if (n > 1) input.resize(1 + below(n - 1));
                break;
            case 3: {
                const size_t more = 1 + below(64);
                if (n + more <= max_size) input.insert(input.begin() + static_cast<long>(1 + below(n)), more, 0);
                break;
            }
            case 4:
                if (n > 9) {
                    const size_t at = 1 + below(n - 8);
                    put<uint64_t>(input, at, interesting(get<uint64_t>(input, at), n));
                }
                break;
            default:
                if (n > 2) {  // copy a chunk over another
                    const size_t len = 1 + below(std::min<size_t>(n - 1, 256));
                    const size_t from = 1 + below(n - len), to = 1 + below(n - len);
                    std::memmove(input.data() + to, input.data() + from, len);
                }
        }
    }

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

    std::mt19937_64 m_rng;
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
extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

// Half of the time libFuzzer's own byte mutations, otherwise the structured ones above; an input
// too short to hold a header is replaced by a seed now and then, so an empty corpus starts.
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
    Mutator mutator(seed);
    Bytes input(data, data + size);
    if (size < 1 + sizeof(StaticHeader) && mutator.chance(2)) {
        input = seeds()[mutator.below(seeds().size())];
    }
    if (mutator.chance(2) && !input.empty()) {
        input.resize(std::max(input.size(), size_t{1}));
        const size_t n = LLVMFuzzerMutate(input.data(), input.size(), input.size());
        input.resize(n);
    } else {
        mutator.mutate(input, max_size);
    }
    if (input.size() > max_size) input.resize(max_size);
    std::memcpy(data, input.data(), input.size());
    return input.size();
}
#else
int main(int argc, char** argv) {
    uint64_t runs = 100000, seed = 1;
    std::vector<std::string> files;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--runs" && i + 1 < argc) {
            runs = std::strtoull(argv[++i], nullptr, 10);
        } else if (arg == "--seed" && i + 1 < argc) {
            seed = std::strtoull(argv[++i], nullptr, 10);
        } else {
            files.push_back(arg);
        }
    }
    if (!files.empty()) {
        for (const std::string& name : files) {
            std::ifstream in(name, std::ios::binary);
            const Bytes input{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
            run_one(input.data(), input.size());
        }
        std::printf("static_cache_fuzz: %zu inputs replayed, none crashed\n", files.size());
        return 0;
    }
    Mutator mutator(seed);
    uint64_t opened = 0, verified = 0;
    for (const Bytes& s : seeds()) {
        if (run_one(s.data(), s.size()) != Outcome::verified) fail("seed", "a built cache does not verify");
    }
    for (uint64_t run = 0; run < runs; ++run) {
        Bytes input = seeds()[mutator.below(seeds().size())];
        mutator.mutate(input, 1 << 20);
        const Outcome outcome = run_one(input.data(), input.size());
        opened += outcome != Outcome::refused ? 1 : 0;
        verified += outcome == Outcome::verified ? 1 : 0;
    }
    std::printf("static_cache_fuzz: %llu inputs tried (seed %llu), %llu opened, %llu verified, none crashed\n",
                static_cast<unsigned long long>(runs + seeds().size()), static_cast<unsigned long long>(seed),
                static_cast<unsigned long long>(opened), static_cast<unsigned long long>(verified));
    return 0;
}
#endif
