// What the format fuzzers (static_cache_fuzz.cpp, folder_table_fuzz.cpp) have in common, so
// that a fix to the guarded buffer, the driver or the byte mutations reaches both: they differ in
// their format's seeds, structured mutations and checks, not in how an input is run.
//
// An input is one flags byte and the file; flag bit 0 asks for the header's size and checksum to
// be made to match the file before it is opened (each format's fix_checksum), so that what lies
// behind a valid checksum is what gets tested.
//
// Each fuzzer includes this once and defines fuzz::k_name, the name its messages start with.
#pragma once

#include <algorithm>
#include <cerrno>
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

#ifdef LOOKUP_LIBFUZZER
extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);
#endif

namespace fuzz {

using Bytes = std::vector<uint8_t>;

extern const char k_name[];

constexpr uint8_t k_fix_checksum = 1;

enum class Outcome { refused, opened, verified };

// The input being run, kept so that a failure leaves a file to replay (libFuzzer keeps its own).
inline const uint8_t* g_input = nullptr;
inline size_t g_input_size = 0;

[[noreturn]] inline void fail(const char* what, const std::string& detail) {
    std::fprintf(stderr, "%s: %s: %s\n", k_name, what, detail.c_str());
#ifndef LOOKUP_LIBFUZZER
    if (g_input != nullptr) {
        const std::string name = std::string("/tmp/") + k_name + "-failure-" + std::to_string(::getpid()) + ".bin";
        if (std::FILE* out = std::fopen(name.c_str(), "wb")) {
            std::fwrite(g_input, 1, g_input_size, out);
            std::fclose(out);
            std::fprintf(stderr, "%s: the input is in %s (replay: %s %s)\n", k_name, name.c_str(), k_name, name.c_str());
        }
    }
#endif
    std::abort();
}

// A refusal's message goes to the user on one line.
inline void check_message(const std::string& error) {
    if (error.empty() || error.find('\n') != std::string::npos) fail("bad error message", "[" + error + "]");
}

// `size` bytes at the start of fresh pages (so 8-byte aligned, as open_memory requires),
// read-only once sealed, the page after them inaccessible.
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

inline Outcome run_one(const uint8_t* data, size_t size, void (*fix_checksum)(uint8_t* file, size_t size),
                       Outcome (*exercise)(const uint8_t* file, size_t size)) {
    g_input = data;
    g_input_size = size;
    if (size == 0) return Outcome::refused;
    GuardedBuffer buffer(data + 1, size - 1);
    if (data[0] & k_fix_checksum) fix_checksum(buffer.writable(), size - 1);
    return exercise(buffer.seal(), size - 1);
}

// Where the real writer puts a seed, in a folder of its own. fail() aborts, so destructors do
// not run: a failure while the file exists goes through this one's fail().
class SeedFile {
public:
    explicit SeedFile(const char* file_name) {
        m_folder = std::string("/tmp/") + k_name + ".XXXXXX";
        if (::mkdtemp(m_folder.data()) == nullptr) fuzz::fail("mkdtemp", std::strerror(errno));
        m_path = m_folder + "/" + file_name;
    }
    ~SeedFile() { remove(); }
    SeedFile(const SeedFile&) = delete;
    SeedFile& operator=(const SeedFile&) = delete;

    [[nodiscard]] const std::string& path() const { return m_path; }
    // What the writer wrote, as an input; fixing its checksum changes nothing in a valid file,
    // and mutations of it then start out asking for the fix.
    [[nodiscard]] Bytes input() const {
        std::ifstream in(m_path, std::ios::binary);
        Bytes input{k_fix_checksum};
        input.insert(input.end(), std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        return input;
    }
    [[noreturn]] void fail(const char* what, const std::string& detail) {
        remove();
        fuzz::fail(what, detail);
    }

private:
    void remove() {
        std::remove(m_path.c_str());
        ::rmdir(m_folder.c_str());
    }

    std::string m_folder;
    std::string m_path;
};

// The mutations every format gets: raw byte edits (of the file, never the flags byte) and the
// rounds around them. `Format` derives from this and supplies k_header_size (shorter files get
// raw edits only), k_raw_one_in (how often a file with a header gets them anyway) and
// structured(input, max_size); it may hide interesting() to add values of its own.
template <class Format>
class MutatorBase {
public:
    explicit MutatorBase(uint64_t seed) : m_rng(seed) {}

    uint64_t below(uint64_t n) { return n == 0 ? 0 : m_rng() % n; }
    bool chance(unsigned one_in) { return below(one_in) == 0; }

    // A value near `near` or a boundary.
    uint64_t interesting(uint64_t near, uint64_t bound) { return interesting_at(below(k_interesting), near, bound); }

    // Mutates `input` (flags byte + file) in place; raw byte edits when the file has no header.
    void mutate(Bytes& input, size_t max_size) {
        if (input.empty()) input.push_back(0);
        const int rounds = 1 + static_cast<int>(below(3));
        for (int r = 0; r < rounds; ++r) {
            if (input.size() < 1 + Format::k_header_size || chance(Format::k_raw_one_in)) {
                raw(input, max_size);
            } else {
                self().structured(input, max_size);
            }
        }
        // Mostly behind a valid checksum, or the checksum is all that gets tested.
        input[0] = chance(5) ? static_cast<uint8_t>(input[0] & ~k_fix_checksum)
                             : static_cast<uint8_t>(input[0] | k_fix_checksum);
    }

protected:
    // interesting()'s choices by number, so that a format adding its own keeps drawing these
    // from the same numbers (and a seed the same inputs).
    static constexpr unsigned k_interesting = 10;
    uint64_t interesting_at(uint64_t pick, uint64_t near, uint64_t bound) {
        switch (pick) {
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

    template <class T>
    static T get(const Bytes& b, size_t at) {
        T v{};
        if (at + sizeof v <= b.size()) std::memcpy(&v, b.data() + at, sizeof v);
        return v;
    }
    template <class T>
    static void put(Bytes& b, size_t at, T v) {
        if (at + sizeof v <= b.size()) std::memcpy(b.data() + at, &v, sizeof v);
    }

    std::mt19937_64 m_rng;

private:
    Format& self() { return static_cast<Format&>(*this); }

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
                    put<uint64_t>(input, at, self().interesting(get<uint64_t>(input, at), n));
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
};

#ifdef LOOKUP_LIBFUZZER
// Half of the time libFuzzer's own byte mutations, otherwise the structured ones; an input too
// short to hold a header is replaced by a seed now and then, so that an empty corpus starts.
template <class Mutator>
size_t custom_mutate(uint8_t* data, size_t size, size_t max_size, unsigned int seed, const std::vector<Bytes>& seeds) {
    Mutator mutator(seed);
    Bytes input(data, data + size);
    if (size < 1 + Mutator::k_header_size && mutator.chance(2)) input = seeds[mutator.below(seeds.size())];
    if (mutator.chance(2) && !input.empty()) {
        input.resize(LLVMFuzzerMutate(input.data(), input.size(), input.size()));
    } else {
        mutator.mutate(input, max_size);
    }
    if (input.size() > max_size) input.resize(max_size);
    std::memcpy(data, input.data(), input.size());
    return input.size();
}
#else
// The standalone driver: [--runs N] [--seed S] [FILE ...].
struct Options {
    uint64_t runs = 100000;
    uint64_t seed = 1;
    std::vector<std::string> files;  // to replay, instead of mutating

    Options(int argc, char** argv) {
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
    }
};

inline int replay(const std::vector<std::string>& files, Outcome (*run)(const uint8_t* data, size_t size)) {
    for (const std::string& name : files) {
        std::ifstream in(name, std::ios::binary);
        const Bytes input{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
        run(input.data(), input.size());
    }
    std::printf("%s: %zu inputs replayed, none crashed\n", k_name, files.size());
    return 0;
}

struct Totals {
    uint64_t tried = 0;
    uint64_t seed = 0;
    uint64_t opened = 0;
    uint64_t verified = 0;
};

// Every seed as built must verify (`unverified` says what it is when one does not), then
// options.runs mutations of seeds picked at random.
template <class Mutator>
Totals mutate_seeds(const std::vector<Bytes>& seeds, const Options& options,
                    Outcome (*run)(const uint8_t* data, size_t size), const char* unverified) {
    for (const Bytes& s : seeds) {
        if (run(s.data(), s.size()) != Outcome::verified) fail("seed", unverified);
    }
    Mutator mutator(options.seed);
    Totals totals{options.runs + seeds.size(), options.seed, 0, 0};
    for (uint64_t run_index = 0; run_index < options.runs; ++run_index) {
        Bytes input = seeds[mutator.below(seeds.size())];
        mutator.mutate(input, 1 << 20);
        const Outcome outcome = run(input.data(), input.size());
        totals.opened += outcome != Outcome::refused ? 1 : 0;
        totals.verified += outcome == Outcome::verified ? 1 : 0;
    }
    return totals;
}

// `before` and `after` hold what a fuzzer counts beyond the inputs.
inline void print_summary(const Totals& t, const std::string& before, const std::string& after) {
    std::printf("%s: %s%llu inputs tried (seed %llu), %llu opened, %llu verified%s, none crashed\n", k_name,
                before.c_str(), static_cast<unsigned long long>(t.tried), static_cast<unsigned long long>(t.seed),
                static_cast<unsigned long long>(t.opened), static_cast<unsigned long long>(t.verified), after.c_str());
}
#endif

}  // namespace fuzz
